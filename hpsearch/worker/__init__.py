"""What a Dask worker runs: the trial runner (prepare, run, outcome), the rank processes of a
data-parallel trial, the worker preload and the imports warmed while a worker waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.worker._preload import dask_setup, retire
    from hpsearch.worker._ranks import rendezvous_store
    from hpsearch.worker._runner import flush_tracking, run_trial, spool_tracking

__all__ = [
    "dask_setup",
    "flush_tracking",
    "rendezvous_store",
    "retire",
    "run_trial",
    "spool_tracking",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._preload": ("dask_setup", "retire"),
        "._ranks": ("rendezvous_store",),
        "._runner": (
            "flush_tracking",
            "run_trial",
            "spool_tracking",
        ),
    },
)
