"""The coordinator's side of a scheduler (``search.scheduler``): the hooks that hand it the
trials that pause and end, and queue what it decides (promotions, continuations)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch._optuna import trial_id_of
from hpsearch.schedulers._base import PARENT_TRIAL, PAUSED_AT, RESUMES, TARGET, Ended, Job
from hpsearch.schedulers._mo_asha import RungPoint
from hpsearch.trial import TrialOutcome

if TYPE_CHECKING:
    import optuna
    from distributed import Future

    from hpsearch.schedulers._base import Scheduler
    from hpsearch.spec import StudySpec


@dataclass
class _Ready:
    """A trial that is in the study and waits for a free set."""

    trial_id: int
    number: int
    resume: bool
    size: int
    stop_at: int | None = None  # a scheduler's pause (search.scheduler)
    scheduled: bool = False  # a paused trial a scheduler starts again
    relative: dict[str, tuple[Any, Any]] | None = None  # see TrialTask.relative


@dataclass
class _InFlight:
    number: int
    trial_id: int
    submitted: float
    size: int = 1
    stop_at: int | None = None


class SchedulerDriver:
    """Mixed into the coordinator: what it does for its scheduler."""

    scheduler: Scheduler | None
    spec: StudySpec
    study: optuna.Study
    distributions: Any
    in_flight: dict[Any, _InFlight]
    max_concurrent: int
    progress: Any
    _pending: list[_Ready]
    _storage: Any

    if TYPE_CHECKING:  # the coordinator's own

        def _size(self, params: dict[str, Any]) -> int: ...
        def _set_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None: ...
        def _tell(self, info: _InFlight, outcome: TrialOutcome) -> None: ...
        def _count_outcome(self, outcome: TrialOutcome) -> None: ...

    def _job(self, job: Job, *, scheduled: bool = True) -> _Ready:
        """The trial of a job; ``scheduled`` when it is a paused trial started again (not a
        trial a stopped coordinator left running)."""
        if job.trial_id is None:
            return self._continuation(job)
        assert job.number is not None
        params = self._storage.get_trial(job.trial_id).params
        return _Ready(
            job.trial_id, job.number, True, self._size(params), job.stop_at, scheduled=scheduled
        )

    def _count_resume(self, trial_id: int) -> None:
        """One more start after a pause: the trial's starts minus these (and its
        interruptions) count its lost workers (see Coordinator._losses_of)."""
        attrs = self._storage.get_trial(trial_id).user_attrs
        self._storage.set_trial_user_attr(trial_id, RESUMES, int(attrs.get(RESUMES, 0)) + 1)

    def _continuation(self, job: Job) -> _Ready:
        """Create the trial that continues ``job.copy_from``'s checkpoint with ``job.params``
        (its worker copies the checkpoint in before it starts), and end the one it replaces."""
        self.study.enqueue_trial(job.params, user_attrs=job.attrs)
        trial = self.study.ask(self.distributions)
        if trial.user_attrs.get(PARENT_TRIAL) != job.copy_from:  # someone else's enqueued trial
            raise RuntimeError(f"trial {trial.number} is not the continuation of {job.copy_from}")
        if job.replaces is not None:
            self._end(job.replaces)
        return _Ready(trial_id_of(trial), trial.number, True, self._size(trial.params), job.stop_at)

    def _take_decided(self) -> None:
        """Queue what the scheduler decided (continuations created at once); the study
        records each one's target, so a restarted coordinator knows it was decided."""
        if self.scheduler is None:
            return
        for job in self.scheduler.decided():
            item = self._job(job)
            self._set_attrs(item.trial_id, {TARGET: item.stop_at or self.spec.objective.epochs})
            self._pending.append(item)

    def _promotion(self, ready: list[_Ready]) -> bool:
        """Put a promoted paused trial at the head of ``ready`` (promotions go before new
        trials); whether there was one."""
        if self.scheduler is None or ready or len(self.in_flight) >= self.max_concurrent:
            return False
        job = self.scheduler.next()
        if job is None:
            return False
        ready.append(self._job(job))
        return True

    def _paused(self, info: _InFlight, future: Future, result: Any) -> bool:
        """Hand a paused trial to the scheduler (it stays RUNNING in the study, holding no
        set); whether it was one."""
        if self.scheduler is None:
            return False
        if not (isinstance(result, TrialOutcome) and result.state == "PAUSED"):
            state = result.state if isinstance(result, TrialOutcome) else "FAIL"
            self.scheduler.ended(info.number, state if future.status == "finished" else "FAIL")
            self._take_decided()
            return False
        value: Any = result.value
        if result.values is not None:  # several objectives: all their values at the rung
            constraints = result.extra.get("constraints") or {}
            value = RungPoint(tuple(result.values), dict(constraints))
        assert result.last_step is not None and value is not None
        self._storage.set_trial_user_attr(info.trial_id, PAUSED_AT, result.last_step)
        self.scheduler.paused(info.number, info.trial_id, result.last_step, value)
        self.progress.last = result
        self._take_decided()
        return True

    def _end(self, end: Ended) -> None:
        outcome = TrialOutcome(end.number, end.state, value=end.value, reason=end.reason)
        self._tell(_InFlight(end.number, end.trial_id, 0.0), outcome)
        self._count_outcome(outcome)

    def _close_paused(self, asking: bool) -> None:
        """Nothing in flight: the paused trials the scheduler gives up on end now."""
        if self.scheduler is None:
            return
        for end in self.scheduler.closing(asking):
            self._end(end)
        self._take_decided()
