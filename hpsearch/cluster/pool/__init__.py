"""A device pool that several studies share: a Dask scheduler whose extension arbitrates
which study's trials use the devices (:mod:`hpsearch.cluster.pool._fair`), the coordinator's lease
on it, and ``hpsearch pool start|status|stop``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes
from hpsearch.cluster.pool._fair import DEFAULT_TTL_S, PRIORITIES, PoolState, StudyClaim, water_fill

if TYPE_CHECKING:
    from hpsearch.cluster.pool._lease import HEARTBEAT_S, PoolLease, join_pool, pool_status
    from hpsearch.cluster.pool._serve import DEFAULT_DIR, POOL_FILE, read_pool

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_TTL_S",
    "HEARTBEAT_S",
    "POOL_FILE",
    "PRIORITIES",
    "PoolLease",
    "PoolState",
    "StudyClaim",
    "join_pool",
    "pool_status",
    "read_pool",
    "water_fill",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._lease": (
            "HEARTBEAT_S",
            "PoolLease",
            "join_pool",
            "pool_status",
        ),
        "._serve": (
            "DEFAULT_DIR",
            "POOL_FILE",
            "read_pool",
        ),
    },
)
