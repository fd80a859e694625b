"""The study's share of a pool that several studies use (``hpsearch pool start``): a trial
starts once the pool grants it a lease, gives it back when it ends or pauses, and when the
pool wants devices back for a study with a better claim, the trials ranked lowest yield at
their next safe point (see :mod:`hpsearch.cluster.pool._fair` for the rules).

A yielded trial is not ended and not counted in the budget: it stays RUNNING in the study,
with ``hpsearch.preempted`` saying by whom, and runs again, from its checkpoint, first in
line when the pool grants the study devices again. Only trials that can resume without
training a step twice yield: built-in trials that write a checkpoint each epoch, and user
objectives of one process once they have saved a checkpoint (``ctx.save_checkpoint``:
they stop at the next one); the others run to their end.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from optuna.study import StudyDirection

from hpsearch.coordinator._flight import InFlight, InFlightView, Ready
from hpsearch.tracking import tag
from hpsearch.trial import request_yield, take_yield

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from hpsearch.cluster.pool import PoolLease
    from hpsearch.coordinator._clock import Clock
    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.coordinator")

#: Seconds between two looks at the pool while trials wait for a lease or must yield, at the
#: most: the pool's news (devices freed for the study, or asked back) and a trial's end cut
#: the wait short.
POOL_POLL_S = 0.25
#: Seconds between two looks for a trial's end within that wait.
ENDED_POLL_S = 0.02

_HELP = {
    "held": "Devices the study holds on the shared pool now.",
    "share": "The study's fair share of the pool now, in devices (its weight and priority).",
    "yielding": "Devices the study's trials are handing back to the pool at their next checkpoint.",
    "preempted": "Trials of the study that yielded their devices to another study.",
}


class PoolShare:
    """The study's leases on a pool; without one (a cluster of its own) every check passes."""

    def __init__(
        self,
        lease: PoolLease | None,
        spec: StudySpec,
        *,
        storage: BaseStorage,
        study_dir: str,
        direction: StudyDirection,
    ) -> None:
        self.lease = lease
        self.spec = spec
        self.storage = storage
        self.study_dir = study_dir
        self.direction = direction
        self.yielding: dict[int, float] = {}  # trial number -> devices it hands back
        # Devices handed back toward the pool's asks, all told (see PoolLease.asked_total):
        # trials asked to yield, and trials that ended while an ask was open.
        self.given = 0.0
        self.preempted = 0  # trials that yielded, all told

    @property
    def active(self) -> bool:
        return self.lease is not None

    @staticmethod
    def key(number: int) -> str:
        return f"trial-{number}"

    def want(self, in_flight: InFlightView, waiting: list[Ready], to_ask: int) -> None:
        """Tell the pool what the study could use now: its trials in flight and waiting, and
        the ``to_ask`` trials the sampler has still to give, within ``max_concurrent``.

        All of it at once: a study that joins a busy pool is owed its whole share from its
        first look, so that the pool asks every device back in one go rather than one more
        with each trial the study starts (each ask waits for a trial's next checkpoint)."""
        if self.lease is None:
            return
        size = self._size()
        limit = self.spec.search.max_concurrent
        more = max(0, int(to_ask))
        if isinstance(limit, int):
            more = min(more, max(0, limit - len(in_flight) - len(waiting)))
        demand = sum(info.size for info in in_flight.values())
        demand += sum(item.size for item in waiting) + more * size
        self.lease.want(float(demand), float(waiting[0].size if waiting else size))

    def _size(self) -> float:
        return self.spec.trial_devices

    def pause(self, clock: Clock, seconds: float, ended: Callable[[], bool]) -> None:
        """Wait up to ``seconds`` before the next look at the pool, less where the pool sends
        news (:meth:`PoolLease.wait_for_news`) or a trial ends (``ended``: its devices go
        back at once). A simulated pool has no news: its virtual time moves on."""
        wait = getattr(self.lease, "wait_for_news", None)
        if wait is None:
            clock.sleep(seconds)
            return
        deadline = clock.monotonic() + seconds
        while not ended():
            left = deadline - clock.monotonic()
            if left <= 0 or wait(min(left, ENDED_POLL_S)):
                return

    def fits(self, item: Ready) -> bool:
        """Whether the pool grants ``item`` its devices now (always, without a pool)."""
        return self.lease is None or self.lease.acquire(self.key(item.number), item.size)

    def ended(self, info: InFlight) -> None:
        """A trial ended, paused, yielded or lost its worker: its devices go back."""
        if self.yielding.pop(info.number, None) is not None:
            take_yield(self.study_dir, info.number)  # it ended before it saw the request
        elif self.lease is not None and self.lease.asked_total > self.given + 1e-9:
            self.given += info.size  # its end gives the pool what it asked, as a yield would
        if self.lease is not None:
            self.lease.release(self.key(info.number))

    def give_back(self, in_flight: InFlightView) -> None:
        """Ask the lowest-ranked trials to yield as many devices as the pool wants back."""
        if self.lease is None:
            return
        owed = self.lease.asked_total - self.given
        if owed <= 1e-9:
            return
        candidates = [
            info
            for info in in_flight.values()
            if info.number not in self.yielding and self._can_yield(info)
        ]
        for info in sorted(candidates, key=self._rank):
            if owed <= 1e-9:
                break
            reason = self.lease.reason or "preempted by another study on the pool"
            request_yield(self.study_dir, info.number, reason)
            self.yielding[info.number] = info.size
            self.given += info.size
            owed -= info.size
            log.info("trial %d yields its devices: %s", info.number, reason)

    def _can_yield(self, info: InFlight) -> bool:
        """Whether the trial resumes without training a step twice (see the module's text)."""
        if not self.spec.is_user_objective:
            return self.spec.objective.checkpoint_interval is not None
        if info.size > 1:  # its ranks stop together only at a report: a step would run twice
            return False
        from hpsearch.trial import CheckpointStore, RunLayout

        checkpoints = RunLayout.of_study_dir(self.study_dir).checkpoints
        store = CheckpointStore(checkpoints, info.number)
        return store.latest.exists() or store.previous.exists()

    def _rank(self, info: InFlight) -> tuple[int, float]:
        """Worst first: the trial's latest report, worst by the study's direction; a trial
        that has reported nothing yet after those that have (nothing says it is worse)."""
        try:
            values = self.storage.get_trial(info.trial_id).intermediate_values
        except Exception:
            values = {}
        if not values:
            return (1, 0.0)
        latest = values[max(values)]
        if not math.isfinite(latest):
            return (0, -math.inf)
        return (0, -latest if self.direction == StudyDirection.MINIMIZE else latest)

    def preempted_trial(self, info: InFlight, reason: str | None) -> Ready:
        """A trial that yielded: it waits, first in line, to run again from its checkpoint."""
        self.preempted += 1
        try:
            attrs: dict[str, Any] = self.storage.get_trial(info.trial_id).user_attrs
            count = int(attrs.get(tag.PREEMPTIONS, 0)) + 1
            self.storage.set_trial_user_attr(info.trial_id, tag.PREEMPTIONS, count)
            self.storage.set_trial_user_attr(info.trial_id, tag.PREEMPTED, reason or "preempted")
        except Exception as exc:  # the trial resumes anyway
            log.debug("trial %d not marked preempted: %s", info.number, exc)
        return info.again()

    def figures(self) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
        """The study's place in the pool for Prometheus (see :mod:`hpsearch.metrics`)."""
        if self.lease is None:
            return
        lease = self.lease
        yield "hpsearch_pool_devices_held", "gauge", _HELP["held"], {}, lease.held()
        yield "hpsearch_pool_fair_share", "gauge", _HELP["share"], {}, lease.share
        yield "hpsearch_pool_yielding", "gauge", _HELP["yielding"], {}, sum(self.yielding.values())
        yield "hpsearch_pool_preemptions_total", "counter", _HELP["preempted"], {}, self.preempted

    def close(self) -> None:
        """Leave the pool: the study's leases are released at once."""
        if self.lease is not None:
            self.lease.close()
