"""Several coordinators on one simulated cluster, one at a time, in virtual time.

A coordinator's loop blocks: it waits for a finished trial, or sleeps between two looks at
a pool. With one coordinator the cluster simply runs its events until the wait is over
(:mod:`._cluster`). With several, each runs in a thread of its own, and the :class:`Kernel`
lets exactly one of them run at a time: a coordinator that would block says what it waits
for and hands over; the kernel wakes the first one (by its index) whose wait is over, or,
when none is, moves the cluster to its next event or to the earliest wake-up, whichever
comes first. So the threads never run at once and the order of everything is decided by
virtual time and the coordinators' indices: the same inputs give the same trace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol


class SimulationStalled(RuntimeError):
    """Trials wait for a result that no event will ever bring (a bug, never a user error)."""


class Timeline(Protocol):
    """What the kernel drives of the simulated cluster (:class:`~._cluster.SimCluster`)."""

    now: float

    def next_event_time(self) -> float | None: ...

    def advance_to(self, when: float) -> None: ...

    def step(self) -> bool: ...


class _Stop(BaseException):
    """Ends a coordinator's thread when the simulation is torn down."""


class Kernel:
    """Runs coordinator threads one at a time on ``cluster`` (see the module's text)."""

    def __init__(self, cluster: Timeline) -> None:
        self.cluster = cluster
        self._cond = threading.Condition()
        self._local = threading.local()
        self._waits: dict[int, tuple[float | None, Callable[[], bool] | None]] = {}
        self._running: int | None = None
        self._done: set[int] = set()
        self._errors: dict[int, BaseException] = {}
        self._stopping = False

    # ------------------------------------------------------------------ in a coordinator

    @property
    def me(self) -> int | None:
        """The index of the coordinator thread calling (None: not one of them)."""
        return getattr(self._local, "index", None)

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Block this coordinator until ``ready()`` holds (others run meanwhile)."""
        self._block(None, ready)

    def sleep_until(self, when: float) -> None:
        """Block this coordinator until the clock reads ``when``."""
        self._block(when, None)

    def _block(self, when: float | None, ready: Callable[[], bool] | None) -> None:
        me = self.me
        assert me is not None
        with self._cond:
            self._waits[me] = (when, ready)
            self._running = None
            self._cond.notify_all()
            while self._running != me:
                if self._stopping:
                    raise _Stop
                self._cond.wait()

    # ------------------------------------------------------------------ the driver

    def run(self, bodies: list[Callable[[], Any]]) -> list[Any]:
        """Run each body in a coordinator thread of its own until all have returned; their
        results (a body's exception is raised here)."""
        results: list[Any] = [None] * len(bodies)
        threads = []
        for index, body in enumerate(bodies):
            thread = threading.Thread(target=self._thread, args=(index, body, results), daemon=True)
            threads.append(thread)
            with self._cond:
                self._waits[index] = (None, lambda: True)
            thread.start()
        try:
            self._drive(len(bodies))
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            for thread in threads:
                thread.join(timeout=10)
        for error in self._errors.values():
            raise error
        return results

    def _thread(self, index: int, body: Callable[[], Any], results: list[Any]) -> None:
        self._local.index = index
        try:
            with self._cond:
                while self._running != index:
                    if self._stopping:
                        return
                    self._cond.wait()
            results[index] = body()
        except _Stop:
            pass
        except BaseException as exc:  # raised again by the driver
            self._errors[index] = exc
        finally:
            with self._cond:
                self._done.add(index)
                self._waits.pop(index, None)
                self._running = None
                self._cond.notify_all()

    def _drive(self, count: int) -> None:
        while True:
            with self._cond:
                while self._running is not None:
                    self._cond.wait()
                if self._errors or len(self._done) == count:
                    return
                pick = next((i for i in sorted(self._waits) if self._over(*self._waits[i])), None)
                if pick is not None:
                    del self._waits[pick]
                    self._running = pick
                    self._cond.notify_all()
                    continue
                wakes = [w for w, _ in self._waits.values() if w is not None]
            upcoming = self.cluster.next_event_time()
            earliest = min(wakes, default=None)
            if earliest is not None and (upcoming is None or earliest < upcoming):
                self.cluster.advance_to(earliest)
            elif not self.cluster.step():
                raise SimulationStalled("the coordinators wait, and no event is left")

    def _over(self, when: float | None, ready: Callable[[], bool] | None) -> bool:
        if when is not None:
            return self.cluster.now >= when
        return ready is None or bool(ready())
