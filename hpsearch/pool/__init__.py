"""A device pool that several studies share: a Dask scheduler whose extension arbitrates
which study's trials use the devices (:mod:`hpsearch.pool._fair`), the coordinator's lease
on it, and ``hpsearch pool start|status|stop``."""

from __future__ import annotations

from hpsearch.pool._fair import DEFAULT_TTL_S, PRIORITIES, PoolState, StudyClaim, water_fill

__all__ = ["DEFAULT_TTL_S", "PRIORITIES", "PoolState", "StudyClaim", "water_fill"]
