"""Lost workers: a trial whose worker was lost runs again, resuming from its checkpoint, up
to ``search.max_retries`` times, and then ends FAIL with the reason ("worker lost 3 times:
...")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hpsearch.coordinator._flight import InFlight, Ready
from hpsearch.search.schedulers import RESUMES
from hpsearch.tracking import tag
from hpsearch.trial import OutcomeState, TrialOutcome

if TYPE_CHECKING:
    from distributed import Future
    from optuna.storages import BaseStorage

    from hpsearch.metrics import NoMetrics

log = logging.getLogger("hpsearch.coordinator")


class WorkerLosses:
    """How each trial in flight ended: run again after a lost worker (:meth:`retry`), or its
    outcome (:meth:`outcome`). It keeps the losses of the trials that have not ended only
    (:meth:`forget` when one ends).

    ``max_retries``: ``search.max_retries``; ``storage``: the study's (a trial's starts, which
    count the losses Dask retried itself); ``metrics``: told of each lost worker.
    """

    def __init__(self, *, max_retries: int, storage: BaseStorage, metrics: NoMetrics) -> None:
        self.max_retries = max_retries
        self.storage = storage
        self.metrics = metrics
        self.losses: dict[int, int] = {}  # trial number -> times its worker was lost
        self.last_loss: dict[int, str] = {}  # trial number -> why it ended after its last loss

    @staticmethod
    def error(future: Future, result: Any) -> BaseException | None:
        """The exception a future that did not finish ended with (None if it finished)."""
        if future.status == "finished":
            return None
        exc = result[1] if isinstance(result, tuple) else result
        return exc if isinstance(exc, BaseException) else None

    def losses_of(self, info: InFlight) -> int:
        """How many times this trial's worker was lost: counted here, or by its starts
        (where Dask retried the task on other workers before giving up)."""
        from hpsearch.coordinator._interruption import interruptions

        self.losses[info.number] = self.losses.get(info.number, 0) + 1
        try:
            attrs = self.storage.get_trial(info.trial_id).user_attrs
            starts = int(attrs.get(tag.ATTEMPT, 0)) - interruptions(attrs)
            starts -= int(attrs.get(RESUMES, 0))  # a scheduler's, after its pauses
        except Exception:
            starts = 0
        return max(self.losses[info.number], starts)

    def retry(self, info: InFlight, future: Future, result: Any) -> Ready | None:
        """The trial to run again if its worker was lost and retries are left, else None."""
        from distributed import KilledWorker

        exc = self.error(future, result)
        if not isinstance(exc, KilledWorker):
            return None
        losses = self.losses_of(info)
        self.metrics.on_worker_lost(retried=losses <= self.max_retries)
        if losses > self.max_retries:
            self.last_loss[info.number] = (
                f"worker lost {losses} time{'s' if losses > 1 else ''}: {exc}"
            )
            return None
        log.warning(
            "trial %d: its worker was lost (%d of %d retries); "
            "it runs again, from its last checkpoint if it has one",
            info.number,
            losses,
            self.max_retries,
        )
        return info.again()

    def outcome(self, info: InFlight, future: Future, result: Any) -> TrialOutcome:
        """How the trial of ``future`` ended (its reason, if it failed)."""
        if future.status == "finished":
            return result
        exc = self.error(future, result)
        if info.number in self.last_loss:
            reason = self.last_loss[info.number]
        else:
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else f"task {future.status}"
        return TrialOutcome(
            info.number,
            OutcomeState.FAIL,
            reason=reason,
            error_type=type(exc).__name__ if exc is not None else None,
        )

    def forget(self, number: int) -> None:
        """A trial ended: its losses are told."""
        self.losses.pop(number, None)
        self.last_loss.pop(number, None)
