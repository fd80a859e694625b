"""The embedded default: a local cluster of Nanny worker processes, one per device set.

``LocalCluster`` gives every worker the same resources and environment, so the local
cluster is a ``SpecCluster`` whose workers each get their own: the devices of their set
(``CUDA_VISIBLE_DEVICES`` for GPUs), their share of the CPU threads, and the resource they
advertise. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import SpecCluster


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def local_worker_specs(
    *, n_workers: int | None, gpus_per_trial: int, n_cores: int | None = None
) -> dict[str, dict[str, Any]]:
    """The worker specs of a CPU-slot cluster (pure: nothing is started).

    Each worker owns ``gpus_per_trial`` CPU slots; ``n_workers`` defaults to as many as the
    cores allow (at least one). Threads are shared out evenly.

    Example:
        >>> specs = local_worker_specs(n_workers=None, gpus_per_trial=1, n_cores=4)
        >>> len(specs), specs["hpsearch-0"]["options"]["resources"]
        (4, {'SLOT': 1})
        >>> specs["hpsearch-0"]["options"]["env"]["HPSEARCH_THREADS"]
        '1'
    """
    cores = n_cores or _cores()
    n = n_workers or max(1, cores // max(1, gpus_per_trial))
    threads = max(1, cores // n)
    specs = {}
    for i in range(n):
        env = {
            "HPSEARCH_DEVICES": "cpu",
            "HPSEARCH_THREADS": str(threads),
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "MLFLOW_LOGGING_LEVEL": "WARNING",
            "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning",
        }
        specs[f"hpsearch-{i}"] = {
            "cls": "distributed.Nanny",
            "options": {
                "nthreads": 1,  # one trial at a time per device set
                "resources": {"SLOT": gpus_per_trial},
                "env": env,
                "host": "127.0.0.1",
                "dashboard": False,
                "name": f"hpsearch-{i}",
                "silence_logs": logging.WARNING,
                "preload": ["hpsearch.preload"],
            },
        }
    return specs


def start_local_cluster(*, n_workers: int | None, gpus_per_trial: int, dashboard: bool = False) -> SpecCluster:
    """Start a local cluster of worker processes on 127.0.0.1."""
    import importlib.util

    from distributed import Nanny, Scheduler, SpecCluster

    workers = local_worker_specs(n_workers=n_workers, gpus_per_trial=gpus_per_trial)
    for spec in workers.values():
        spec["cls"] = Nanny
    dashboard_address = ":0" if dashboard and importlib.util.find_spec("bokeh") else None
    scheduler = {
        "cls": Scheduler,
        "options": {"host": "127.0.0.1", "port": 0, "dashboard_address": dashboard_address},
    }
    return SpecCluster(
        workers=workers, scheduler=scheduler, silence_logs=logging.WARNING, name="hpsearch"
    )
