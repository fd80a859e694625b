"""A cluster in virtual time: what the coordinator asks of a Dask client, answered by an
event queue instead of worker processes.

The coordinator submits trials, reads the workers' resources, waits for finished trials and
cancels them, as it does on Dask; here :meth:`SimCluster.submit` places a trial on a free
simulated worker (first come, first served, as Dask holds a task until a worker has the
resources it asks for), and each epoch of the trial is an event at the virtual second its
benchmark says it ends (:mod:`hpsearch.simulation._trial`). Waiting for a finished trial
moves the clock from event to event; nothing sleeps. A worker is lost at random times
(exponential, mean ``worker_mtbf``): its trial's future fails with Dask's own
``KilledWorker``, as ``distributed.scheduler.allowed-failures: 0`` makes it on a real
cluster, and the coordinator runs it again from its last checkpoint. The worker comes back
``restart`` seconds later.

Everything is decided by the study's seed and the events' order: the same file and seed
give the same trace.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from hpsearch.simulation._kernel import SimulationStalled

if TYPE_CHECKING:
    from hpsearch.simulation._kernel import Kernel


@dataclass
class TrialSegment:
    """One start of a trial on a worker, until it ends, pauses, or its worker is lost: a line
    of the timeline."""

    future: SimFuture
    number: int
    worker: str
    start: float
    from_epoch: int
    attempt: int
    epoch: int = 0  # the last epoch trained in this segment
    end: float | None = None
    state: str | None = None
    value: float | None = None
    reason: str | None = None
    events: list[str] = field(default_factory=list)

    def close(self, now: float, state: str) -> None:
        if self.end is None:
            self.end, self.state = now, state

    def record(self) -> dict[str, Any]:
        """The segment as a line of the timeline (JSON)."""
        line: dict[str, Any] = {
            "trial": self.number,
            "attempt": self.attempt,
            "worker": self.worker,
            "start": round(self.start, 6),
            "end": None if self.end is None else round(self.end, 6),
            "from_epoch": self.from_epoch,
            "to_epoch": max(self.epoch, self.from_epoch),
            "state": self.state,
        }
        if self.value is not None:
            line["value"] = self.value
        if self.reason:
            line["reason"] = self.reason
        return line


class VirtualClock:
    """The simulated cluster's clock: :meth:`sleep` lets the cluster's events of that time
    happen, and moves on."""

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster

    def monotonic(self) -> float:
        return self._cluster.now

    def sleep(self, seconds: float) -> None:
        until = self._cluster.now + max(0.0, seconds)
        kernel = self._cluster.kernel
        if kernel is not None and kernel.me is not None:  # one of several coordinators
            kernel.sleep_until(until)
        else:
            self._cluster.advance_to(until)


class SimFuture:
    """A trial submitted to the simulated cluster, with the attributes of a Dask future the
    coordinator reads (``key``, ``status``)."""

    def __init__(self, key: str, task: Any, size: float) -> None:
        self.key = key
        self.task = task
        self.size = size
        self.status = "pending"  # pending | finished | error | cancelled
        self.result: Any = None
        self._callbacks: list[Callable[[SimFuture], None]] = []

    def done(self) -> bool:
        return self.status != "pending"

    def add_done_callback(self, fn: Callable[[SimFuture], None]) -> None:
        if self.done():
            fn(self)
        else:
            self._callbacks.append(fn)

    def _finish(self, status: str, result: Any) -> None:
        self.status, self.result = status, result
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def __repr__(self) -> str:
        return f"<SimFuture {self.key} {self.status}>"


class Completions:
    """Dask's ``as_completed(with_results=True, raise_errors=False)`` for simulated futures:
    :meth:`next_batch` runs the cluster's events until one of its futures has finished."""

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster
        self._ready: deque[tuple[SimFuture, Any]] = deque()
        self._waiting = 0

    def add(self, future: SimFuture) -> None:
        self._waiting += 1
        future.add_done_callback(self._done)

    def _done(self, future: SimFuture) -> None:
        self._waiting -= 1
        self._ready.append((future, future.result))

    def has_ready(self) -> bool:
        return bool(self._ready)

    def next_batch(self, block: bool = True) -> list[tuple[SimFuture, Any]]:
        kernel = self._cluster.kernel
        if block and kernel is not None and kernel.me is not None:  # one of several
            kernel.wait_until(lambda: bool(self._ready) or not self._waiting)
        while block and not self._ready and self._waiting:
            if not self._cluster.step():
                raise SimulationStalled(
                    f"{self._waiting} trial(s) in flight, and no event left to end them"
                )
        batch = list(self._ready)
        self._ready.clear()
        return batch


@dataclass
class SimWorker:
    """A simulated worker: its devices, and what runs on it."""

    address: str
    devices: float
    alive: bool = True
    used: float = 0.0
    running: list[TrialSegment] = field(default_factory=list)


class SimCluster:
    """The simulated cluster (and the client the coordinator holds).

    ``workers`` workers of ``devices`` devices each (the resource ``GPU``); ``mtbf``: the mean
    virtual seconds between two losses of one worker (None: none is lost); ``restart``:
    seconds until a lost worker is back; ``start_segment``: how a trial starts on a worker at
    the current time (see :class:`~hpsearch.simulation._trial.TrialRunner`).
    """

    resource_key = "GPU"

    def __init__(
        self,
        *,
        workers: int,
        devices: float,
        seed: int,
        mtbf: float | None = None,
        restart: float = 60.0,
        start_segment: Callable[[SimFuture, SimWorker], TrialSegment],
    ) -> None:
        self.now = 0.0
        self.clock = VirtualClock(self)
        self.kernel: Kernel | None = None  # several coordinators (hpsearch.simulation._kernel)
        self.workers = [SimWorker(f"sim://worker-{i}", devices) for i in range(workers)]
        self.mtbf, self.restart = mtbf, restart
        self._start_segment = start_segment
        self._rng = random.Random(seed)
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._queue: deque[SimFuture] = deque()  # submitted, waiting for a worker
        # Workers with room, lowest index first (a heap, and its members).
        self._free = list(range(workers))
        self._in_free = set(self._free)
        self._info: dict[str, Any] | None = None
        self.losses = 0
        self.device_seconds = 0.0  # devices held by trials, times virtual seconds
        self.segments: list[TrialSegment] = []  # every started segment, in start order
        self.worker_events: list[dict[str, Any]] = []
        if mtbf is not None:
            for worker in self.workers:
                self._schedule_loss(worker)

    # ------------------------------------------------------------------ the client's calls

    def submit(
        self,
        fn: Any,
        task: Any,
        *,
        key: str,
        resources: dict[str, float] | None = None,
        pure: bool = False,
    ) -> SimFuture:
        """Queue a trial (``fn`` is the runner a Dask worker would call: here the trial's
        surrogate runs instead, in virtual time)."""
        size = float((resources or {}).get(self.resource_key, 1.0))
        future = SimFuture(key, task, size)
        self._queue.append(future)
        self._place()
        return future

    def cancel(self, futures: list[SimFuture], force: bool = False) -> None:
        for future in futures:
            if future.done():
                continue
            if future in self._queue:
                self._queue.remove(future)
            for worker in self.workers:
                for segment in list(worker.running):
                    if segment.future is future:
                        self._release(worker, segment, "CANCELLED")
            future._finish("cancelled", None)
        self._place()

    def scheduler_info(self, n_workers: int = -1) -> dict[str, Any]:
        if self._info is None:
            self._info = {
                "workers": {
                    w.address: {"resources": {self.resource_key: w.devices}, "nthreads": 1}
                    for w in self.workers
                    if w.alive
                }
            }
        return self._info

    def run(self, fn: Any, *args: Any, workers: list[str] | None = None, **kwargs: Any) -> dict:
        return {}  # nothing runs on simulated workers (a retiring worker: none here)

    def completions(self) -> Completions:
        return Completions(self)

    # ------------------------------------------------------------------ events

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` at virtual time ``when`` (events of one time run in the order they
        were scheduled)."""
        heapq.heappush(self._events, (when, next(self._seq), action))

    def step(self) -> bool:
        """Run the events of the next virtual time; False when there is none."""
        if not self._events:
            return False
        when = self._events[0][0]
        self.now = max(self.now, when)
        while self._events and self._events[0][0] == when:
            _, _, action = heapq.heappop(self._events)
            action()
        return True

    def next_event_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def advance_to(self, when: float) -> None:
        """Run every event up to ``when``; the clock then reads ``when``."""
        while self._events and self._events[0][0] <= when:
            self.step()
        self.now = max(self.now, when)

    # ------------------------------------------------------------------ trials on workers

    def _place(self) -> None:
        """Start queued trials, first come first served: the head waits for a worker with
        room, and nothing overtakes it."""
        while self._queue:
            future = self._queue[0]
            worker = self._free_worker(future.size)
            if worker is None:
                return
            self._queue.popleft()
            worker.used += future.size
            self._mark_free(worker)
            segment = self._start_segment(future, worker)
            worker.running.append(segment)
            self.segments.append(segment)

    def _free_worker(self, size: float) -> SimWorker | None:
        """The alive worker of lowest index with ``size`` devices free, or None."""
        skipped, found = [], None
        while self._free:
            index = heapq.heappop(self._free)
            self._in_free.discard(index)
            worker = self.workers[index]
            if not worker.alive or worker.devices - worker.used <= 1e-9:
                continue  # it is put back when it has room again
            skipped.append(index)
            if worker.devices - worker.used >= size - 1e-9:
                found = worker
                break
        for index in skipped:
            self._in_free.add(index)
            heapq.heappush(self._free, index)
        return found

    def _mark_free(self, worker: SimWorker) -> None:
        """Keep ``worker`` among those with room (or not)."""
        index = int(worker.address.rsplit("-", 1)[1])
        if worker.alive and worker.devices - worker.used > 1e-9 and index not in self._in_free:
            self._in_free.add(index)
            heapq.heappush(self._free, index)

    def finished(self, worker: SimWorker, segment: TrialSegment, outcome: Any) -> None:
        """A trial's segment ended on ``worker`` with ``outcome``: its devices are free."""
        self._release(worker, segment, outcome.state)
        segment.future._finish("finished", outcome)
        self._place()

    def _release(self, worker: SimWorker, segment: TrialSegment, state: str) -> None:
        worker.running.remove(segment)
        worker.used -= segment.future.size
        self._mark_free(worker)
        segment.close(self.now, state)
        self.device_seconds += segment.future.size * (self.now - segment.start)

    def _schedule_loss(self, worker: SimWorker) -> None:
        assert self.mtbf is not None
        self.at(self.now + self._rng.expovariate(1.0 / self.mtbf), lambda: self._lose(worker))

    def _lose(self, worker: SimWorker) -> None:
        from distributed import KilledWorker

        worker.alive = False
        self._info = None
        self.losses += 1
        self.worker_events.append({"worker": worker.address, "lost": self.now})
        for segment in list(worker.running):
            self._release(worker, segment, "LOST")
            # Dask's own error for a trial whose worker died (what it names of the worker is
            # its address).
            last = cast(Any, SimpleNamespace(address=worker.address))
            error = KilledWorker(segment.future.key, last, 0)
            segment.future._finish("error", error)
        self.at(self.now + self.restart, lambda: self._back(worker))

    def _back(self, worker: SimWorker) -> None:
        worker.alive = True
        self._info = None
        self._mark_free(worker)
        self.worker_events.append({"worker": worker.address, "back": self.now})
        self._schedule_loss(worker)
        self._place()

    def idle(self) -> bool:
        """Whether no trial runs or waits."""
        return not self._queue and not any(w.running for w in self.workers)
