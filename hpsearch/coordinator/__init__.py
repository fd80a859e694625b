"""The coordinator: the ask / submit / tell loop.

It owns the sampler (one process suggests, so concurrent trials never get duplicate
suggestions; TPE's constant liar spreads them out), keeps as many trials in flight as the
cluster has free sets, and tells Optuna how each one ended. Liveness comes from Dask: a
worker that dies makes its future fail with ``KilledWorker``; the coordinator runs the
trial again, resuming from its checkpoint, up to ``search.max_retries`` times, and then
ends it FAIL with the reason ("worker lost 3 times: ..."). Nothing waits on a timeout.

The budget is ``search.n_trials`` ended trials (complete, pruned or failed) in the study
as a whole, so running the same study again resumes it: trials an earlier coordinator left
RUNNING (killed, or interrupted by Ctrl-C: see :mod:`hpsearch.coordinator._interruption`)
are run again (from their checkpoints), and only the missing trials are asked for. With a
scheduler the sampler gives what :meth:`~hpsearch.search.schedulers.Scheduler.budget` says
(pbt: the population; its continuations are created by the scheduler, within ``search.n_trials``).

The coordinator is a package of composed parts, each with its own interface:
:class:`Coordinator` (:mod:`._loop`) runs the loop and owns the trials in flight;
:class:`Placement` (:mod:`._placement`) says how many trials run and whether the next one
fits; :class:`Scheduling` (:mod:`._scheduling`) does what the loop does for a scheduler;
:class:`WorkerLosses` (:mod:`._losses`) decides retries after a lost worker;
:class:`PoolShare` (:mod:`._share`) holds the study's leases on a pool that several studies
share (``hpsearch pool start``) and has trials yield when the pool wants devices back;
:class:`Tally` (:mod:`._tally`) keeps the counts. The trials' records are :class:`Ready` and
:class:`InFlight` (:mod:`._flight`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes
from hpsearch.coordinator._flight import InFlight, InFlightView, Ready
from hpsearch.coordinator._loop import SCALE_POLL_S, Coordinator
from hpsearch.coordinator._losses import WorkerLosses
from hpsearch.coordinator._placement import CAPACITY_REFRESH_S, RECENT_DURATIONS, Placement
from hpsearch.coordinator._scheduling import Host, Scheduling
from hpsearch.coordinator._share import PoolShare
from hpsearch.coordinator._tally import Tally

if TYPE_CHECKING:
    from hpsearch.coordinator._interruption import close_interrupted_runs
    from hpsearch.coordinator._progress import Progress, RichProgress, auto_display

__all__ = [
    "CAPACITY_REFRESH_S",
    "RECENT_DURATIONS",
    "SCALE_POLL_S",
    "Coordinator",
    "Host",
    "InFlight",
    "InFlightView",
    "Placement",
    "PoolShare",
    "Progress",
    "Ready",
    "RichProgress",
    "Scheduling",
    "Tally",
    "WorkerLosses",
    "auto_display",
    "close_interrupted_runs",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._interruption": ("close_interrupted_runs",),
        "._progress": (
            "Progress",
            "RichProgress",
            "auto_display",
        ),
    },
)
