"""Where the coordinator's trials go: how many it keeps in flight, whether the next one fits
the sets that are free, and how many may wait on a worker behind the one it runs."""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any

from hpsearch.coordinator._clock import WALL_CLOCK, Clock

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.cluster import Capacity, JobScaler
    from hpsearch.coordinator._flight import InFlightView, Ready
    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.coordinator")

#: Seconds between two reads of the cluster's workers (see Placement.refresh_capacity).
CAPACITY_REFRESH_S = 2.0
#: Trial durations kept to tell whether trials are short (see Placement.short_trials).
RECENT_DURATIONS = 10


class Placement:
    """The sets a trial needs, and when the next one fits.

    It reads the trials in flight (``in_flight``, the coordinator's) and never changes them;
    it keeps the cluster's capacity (re-read by :meth:`refresh_capacity`), the concurrency
    that follows from it, and the latest trials' durations (:meth:`note_duration`).
    ``scheduled``: the study has a scheduler (``search.scheduler``); ``searched_sizes``: the
    sampler searches ``gpus_per_trial``; ``scaler``: jobs follow the trials (cluster.adapt on
    SLURM).
    """

    def __init__(
        self,
        spec: StudySpec,
        *,
        client: Client,
        capacity: Capacity,
        in_flight: InFlightView,
        scaler: JobScaler | None = None,
        scheduled: bool = False,
        searched_sizes: bool = False,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        self.spec = spec
        self.client = client
        self.capacity = capacity
        self.in_flight = in_flight
        self.scaler = scaler
        self.scheduled = scheduled
        self.searched_sizes = searched_sizes
        self.size = spec.trial_devices
        self.max_concurrent = self._max_concurrent()
        # The latest trials' durations only: nothing the coordinator keeps grows with the study.
        self.durations: collections.deque[float] = collections.deque(maxlen=RECENT_DURATIONS)
        self.clock = clock
        self._capacity_read = clock.monotonic()

    def refresh_capacity(self) -> None:
        """Re-read the cluster's workers (at most every 2 s): workers that join (an adaptive
        SLURM or Kubernetes cluster, a node started late) are used, ones that left are not
        counted on. With no worker at all, one trial is still submitted, so that an adaptive
        cluster sees work to scale up for."""
        from hpsearch.cluster import capacity

        now = self.clock.monotonic()
        if now - self._capacity_read < CAPACITY_REFRESH_S:
            return
        self._capacity_read = now
        try:
            cap = capacity(self.client)
        except Exception as exc:  # the scheduler is busy or restarting: keep what we know
            log.debug("capacity not refreshed: %s", exc)
            return
        if cap.total > 0 and (cap.key == self.capacity.key or self.capacity.key is None):
            self.capacity = cap
            self.max_concurrent = self._max_concurrent()

    def _max_concurrent(self) -> int:
        fits = self.capacity.concurrent_trials(self.size)
        wanted = self.spec.search.max_concurrent
        if wanted in (None, "auto"):
            return max(1, fits)
        return max(1, min(int(wanted), fits) if fits else int(wanted))

    def note_duration(self, seconds: float) -> None:
        """An ended trial's duration (the latest ones tell whether trials are short)."""
        self.durations.append(seconds)

    def short_trials(self) -> bool:
        """Whether trials are short enough that asking ahead pays.

        Asking the next trial while the sets are busy takes the sampler's time (10-20 ms
        with TPE) off the critical path, which matters for trials of a second or less. But
        an asked trial is RUNNING in the study from then on, so for long trials it would
        misstate their start time by a whole trial, for a gain nobody would notice.
        """
        recent = list(self.durations)
        return bool(recent) and sorted(recent)[len(recent) // 2] < 1.0

    def size_of(self, params: dict[str, Any]) -> float:
        """The devices a trial needs: searched, or the study's ``gpus_per_trial`` (a fraction
        of one device where trials are packed)."""
        return float(params.get("gpus_per_trial", self.size))

    def queued(self) -> int:
        """Trials that may wait on a worker for its set, beyond one per set: as many as there
        are sets, while trials are short; else none.

        A trial queued on a worker starts the moment that worker's set is free, instead of
        after the coordinator has heard of the end and submitted the next: for trials of
        milliseconds, that turnaround is most of a set's idle time (about 20 % of a trivial
        trial's cost on 2 cores). Dask holds a queued trial until the resources it asks for
        are free, so no set ever runs two; a queued trial is RUNNING in the study from its
        ask, as one asked ahead is. Only with one size of trial, the sets' own concurrency
        (``search.max_concurrent: auto``), no scheduler (its decisions need the latest
        results), no job scaling (jobs follow the trials that wait) and no grid (trials
        asked while the last points run may repeat one).
        """
        if (
            self.capacity.key is None
            or self.scheduled
            or self.scaler is not None
            or self.spec.search.max_concurrent not in (None, "auto")
            or self.spec.search.sampler.name == "grid"
            or self.searched_sizes
            or not self.short_trials()
        ):
            return 0
        return self.max_concurrent

    def full(self) -> bool:
        """Whether no more trials may be in flight, counting those that may wait on a worker
        (see :meth:`queued`): the next one is not even asked for."""
        return len(self.in_flight) >= self.max_concurrent + self.queued()

    def fits(self, item: Ready) -> bool:
        """Whether ``item`` fits the devices not in use (and the concurrency limit), counting
        the trials that may wait on a worker (see :meth:`queued`)."""
        queued = self.queued()
        if len(self.in_flight) >= self.max_concurrent + queued:
            return False
        if self.capacity.key is None or not self.in_flight:
            return True  # with nothing in flight, Dask queues it until a worker fits
        # Every trial of a study has its size, unless the sampler searches it: no sum over a
        # thousand trials in flight for each one placed.
        used = (
            sum(f.size for f in self.in_flight.values())
            if self.searched_sizes
            else len(self.in_flight) * self.size
        )
        room = self.capacity.total * (2 if queued else 1)
        return used + item.size <= room and item.size <= self.capacity.largest

    def set_free(self) -> bool:
        """Whether a set is free: fewer trials in flight than the concurrency allows (a
        scheduler's promotion waits for one)."""
        return len(self.in_flight) < self.max_concurrent

    def running(self) -> int:
        """Trials running now (not those waiting on a worker for their set)."""
        return min(len(self.in_flight), self.max_concurrent)
