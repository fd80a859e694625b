"""Jobs that follow the study's trials (``cluster.adapt`` on SLURM): a job is submitted for
trials that wait for a set, jobs with nothing to run end, and a job that ended by itself
(``scancel``, its walltime, a node failure) is replaced while trials still need it.

Dask's own adaptive scaling does not serve here: it sizes the cluster from the tasks the
scheduler already holds, but the coordinator submits a trial only once a set is free for it
(so that trials never queue behind one another on a busy worker), so with no worker at all,
or every set busy, the scheduler sees no work to scale up for. Nor does it notice a job that
ended by itself. :class:`JobScaler` is told the number of trials that want a set instead, and
reads which jobs' workers have joined from the scheduler.

A job runs one Dask worker per set (see :mod:`hpsearch.cluster.jobqueue_worker`), named
``JOB-i``; the job's name is the name dask-jobqueue gave it.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger(__name__)

#: Seconds between two looks at the jobs (when the trials wanting a set did not change).
SCALE_INTERVAL_S = 2.0
#: Seconds a job's workers must have run nothing before the job is ended for having nothing
#: to do: the trials wanting a set dip for a moment between one trial's end and the next
#: one's start, and a job ended in that moment is submitted again at once.
IDLE_GRACE_S = 2 * SCALE_INTERVAL_S


def job_of(worker_name: str) -> str:
    """The job a worker belongs to: its name without the set index.

    Example:
        >>> job_of("SLURMCluster-3-0")
        'SLURMCluster-3'
    """
    return str(worker_name).rsplit("-", 1)[0]


class JobScaler:
    """Keeps between ``minimum`` and ``maximum`` jobs, as many as the trials that want a set.

    Args:
        cluster: a dask-jobqueue cluster (its ``worker_spec`` holds one entry per job).
        client: a client of its scheduler.
        minimum: jobs kept even with no trial to run.
        maximum: jobs never exceeded.
        sets_per_job: trials one job runs at once.
    """

    def __init__(
        self, cluster: Any, client: Client, *, minimum: int, maximum: int, sets_per_job: int
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.minimum = minimum
        self.maximum = maximum
        self.sets_per_job = max(1, sets_per_job)
        # Jobs whose workers have been seen, by name: the job object (a name is used again
        # for a job submitted after one of that name was closed).
        self.joined: dict[str, Any] = {}
        self.submitted = 0  # jobs asked for, all told
        self.replaced = 0  # jobs that ended by themselves and were forgotten
        self._wanted: int | None = None
        self._looked = 0.0
        self._idle_since: dict[str, float] = {}  # jobs seen idle: since when, unbroken

    def target(self, trials: int) -> int:
        """The jobs for ``trials`` trials that want a set."""
        jobs = math.ceil(max(0, trials) / self.sets_per_job)
        return min(self.maximum, max(self.minimum, jobs))

    def update(self, trials: int) -> None:
        """Scale for ``trials`` trials that run or wait for a set. Cheap to call often: it
        looks at the jobs when that number changed, or every :data:`SCALE_INTERVAL_S`."""
        now = time.monotonic()
        if trials == self._wanted and now - self._looked < SCALE_INTERVAL_S:
            return
        self._wanted, self._looked = trials, now
        try:
            self._scale(self.target(trials))
        except Exception as exc:  # the scheduler or the batch system is busy: next time
            log.debug("jobs not scaled: %s", exc)

    def _scale(self, target: int) -> None:
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        present: dict[str, list[str]] = {}
        for address, info in workers.items():
            present.setdefault(job_of(info.get("name", "")), []).append(address)
        started = dict(self.cluster.workers)  # name -> job object, once submitted
        self.joined.update({name: started[name] for name in present if name in started})
        jobs = list(self.cluster.worker_spec)
        # A job whose workers joined and are all gone has ended (scancel, walltime): forget it.
        gone = [
            name
            for name in jobs
            if name not in present and name in started and self.joined.get(name) is started[name]
        ]
        if gone:
            log.warning("job(s) %s ended; their trials run again on other jobs", ", ".join(gone))
            self.replaced += len(gone)
            self._close(gone)
            jobs = [name for name in jobs if name not in gone]
        if target > len(jobs):
            log.info("submitting %d job(s) for the trials waiting", target - len(jobs))
            self.submitted += target - len(jobs)
            self.cluster.scale(jobs=target)
        elif target < len(jobs):
            self._close(self._idle(jobs, present)[: len(jobs) - target])

    def _idle(self, jobs: list[str], present: dict[str, list[str]]) -> list[str]:
        """Jobs that run nothing: first those still queued, then those whose workers have
        been idle for :data:`IDLE_GRACE_S` and hold no result (a trial's outcome not yet read
        would be lost, and the trial run again)."""
        busy = {address for address, keys in self.client.processing().items() if keys}
        busy |= {address for address, keys in self.client.has_what().items() if keys}
        queued = [name for name in jobs if name not in present]
        now = time.monotonic()
        idle_now = [
            name for name in jobs if name in present and not busy.intersection(present[name])
        ]
        self._idle_since = {name: self._idle_since.get(name, now) for name in idle_now}
        idle = [name for name in idle_now if now - self._idle_since[name] >= IDLE_GRACE_S]
        return queued + idle

    def _close(self, names: list[str]) -> None:
        if names:
            self.cluster.sync(self.cluster.scale_down, names)
