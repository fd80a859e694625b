"""Starting or joining the Dask cluster, and what it can run.

A worker owns a set of devices and advertises it as a Dask resource: ``GPU=k`` for a set of
k GPUs, ``SLOT=k`` for k CPU slots on a machine without GPUs. Every trial asks for
``{key: gpus_per_trial}``, so the Dask scheduler never puts two trials on one set.
"""

from hpsearch.cluster._base import Capacity, capacity, connect
from hpsearch.cluster._local import local_worker_specs, start_local_cluster

GPU = "GPU"
SLOT = "SLOT"

__all__ = ["GPU", "SLOT", "Capacity", "capacity", "connect", "local_worker_specs", "start_local_cluster"]
