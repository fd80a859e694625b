"""Starting or joining the Dask cluster, and what it can run.

A worker owns a set of devices and advertises it as a Dask resource: ``GPU=k`` for a set of
k GPUs, ``SLOT=k`` for k CPU slots on a machine without GPUs. Every trial asks for
``{key: gpus_per_trial}``, so the Dask scheduler never puts two trials on one set.
"""

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes
from hpsearch.cluster._base import WORKER_WAIT_S, Capacity, capacity, check_workers, connect
from hpsearch.cluster._env import WorkerDevices, cores, lease_devices
from hpsearch.cluster._gpus import (
    DeviceAllocator,
    GpuInfo,
    GpuPlan,
    discover_gpus,
    nvml_links,
    plan_sets,
)
from hpsearch.cluster._local import start_local_cluster, worker_specs
from hpsearch.cluster._node import node_workers, serve_workers

GPU = "GPU"
SLOT = "SLOT"


if TYPE_CHECKING:
    from hpsearch.cluster._backend import trial_sizes
    from hpsearch.cluster._base import security
    from hpsearch.cluster._env import (
        ENV_THREADS,
        NANNY_CONFIG,
        rank_env,
        release_memory,
        tune_allocator,
    )
    from hpsearch.cluster._gpus import device_count
    from hpsearch.cluster._mig import gpu_devices
    from hpsearch.cluster._open import backend_for
    from hpsearch.cluster._scaling import JobScaler

__all__ = [
    "ENV_THREADS",
    "GPU",
    "NANNY_CONFIG",
    "SLOT",
    "WORKER_WAIT_S",
    "Capacity",
    "DeviceAllocator",
    "GpuInfo",
    "GpuPlan",
    "JobScaler",
    "WorkerDevices",
    "backend_for",
    "capacity",
    "check_workers",
    "connect",
    "cores",
    "device_count",
    "discover_gpus",
    "gpu_devices",
    "lease_devices",
    "node_workers",
    "nvml_links",
    "plan_sets",
    "rank_env",
    "release_memory",
    "security",
    "serve_workers",
    "start_local_cluster",
    "trial_sizes",
    "tune_allocator",
    "worker_specs",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._backend": ("trial_sizes",),
        "._base": ("security",),
        "._env": (
            "ENV_THREADS",
            "NANNY_CONFIG",
            "rank_env",
            "release_memory",
            "tune_allocator",
        ),
        "._gpus": ("device_count",),
        "._mig": ("gpu_devices",),
        "._open": ("backend_for",),
        "._scaling": ("JobScaler",),
    },
)
