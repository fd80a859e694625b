"""Starting or joining the Dask cluster, and what it can run.

A worker owns a set of devices and advertises it as a Dask resource: ``GPU=k`` for a set of
k GPUs, ``SLOT=k`` for k CPU slots on a machine without GPUs. Every trial asks for
``{key: gpus_per_trial}``, so the Dask scheduler never puts two trials on one set.
"""

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

GPU = "GPU"
SLOT = "SLOT"

__all__ = [
    "GPU",
    "SLOT",
    "WORKER_WAIT_S",
    "Capacity",
    "DeviceAllocator",
    "GpuInfo",
    "GpuPlan",
    "WorkerDevices",
    "capacity",
    "check_workers",
    "connect",
    "cores",
    "discover_gpus",
    "lease_devices",
    "nvml_links",
    "plan_sets",
    "start_local_cluster",
    "worker_specs",
]
