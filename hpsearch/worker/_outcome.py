"""How one attempt of a trial ends: the objective's return or its exception, mapped to a
:class:`~hpsearch.trial.TrialOutcome` in one place (:func:`outcome_of`), with what the
trial's MLflow run records of it.

| how the objective ended                      | outcome       | the trial                  |
|----------------------------------------------|---------------|----------------------------|
| returned a finite value (or values)          | COMPLETE      | told complete              |
| ``TrialPaused`` / a scheduler's pause        | PAUSED        | runs again when promoted   |
| ``optuna.TrialPruned`` (or ``should_prune``) | PRUNED        | told pruned, with a reason |
| ``TrialStopped`` (the run stops)             | INTERRUPTED   | resumes in the next run    |
| ``TrialStopped`` (it yields its devices)     | PREEMPTED     | resumes when devices free  |
| any other exception, a NaN, out of memory    | FAIL          | told failed, with a reason |

It never changes the study itself: the coordinator tells Optuna.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from hpsearch.exceptions import TrialDiverged, failure_reason
from hpsearch.search import cached_trial
from hpsearch.tracking import TrialRun, tag
from hpsearch.trial import (
    OutcomeState,
    TrackedTrial,
    TrialOutcome,
    TrialPaused,
    TrialStopped,
    TrialTask,
    fault_point,
    take_yield,
)
from hpsearch.worker._resume import record_outcome


@dataclass
class Attempt:
    """One attempt of a trial in this process, as its parts share it."""

    task: TrialTask
    run: TrialRun
    worker: str
    pid: int
    study: optuna.Study | None
    resumed: bool
    figures: dict[str, float]
    start: float = field(default_factory=time.perf_counter)
    #: The trial as it reports to the study, once it is reached; and as the objective holds
    #: it (itself, or a data-parallel trial's rank 0 around it).
    tracked: TrackedTrial | None = None
    trial: Any = None

    def outcome(self, state: OutcomeState, **fields: Any) -> TrialOutcome:
        """An outcome of this attempt (its worker and process filled in)."""
        return TrialOutcome(
            self.task.trial_number, state, worker=self.worker, pid=self.pid, **fields
        )


def outcome_of(attempt: Attempt, objective_run: Callable[[], Any]) -> TrialOutcome:
    """Run the objective and say how the attempt ended: its return, or what it raised."""
    try:
        return _completed(attempt, objective_run())
    except TrialStopped as exc:  # the run asked its trials to stop: resumes later
        return _stopped(attempt, exc)
    except optuna.TrialPruned as exc:
        paused = _paused_at(attempt.tracked, exc)
        if paused is not None and attempt.tracked is not None:
            return _paused(attempt, attempt.tracked, paused)
        return _pruned(attempt, exc)
    except Exception as exc:
        return _failed(attempt, exc)


def _completed(attempt: Attempt, value: Any) -> TrialOutcome:
    """The objective returned: its value (or values), kept in the study before it is handed
    back; a value that is not finite is a divergence."""
    spec, tracked = attempt.task.spec, attempt.tracked
    assert tracked is not None
    if spec.is_multi_objective or spec.constraints:
        from hpsearch.search.pareto import apply_constraints, objective_values

        values = objective_values(value, spec)
        if spec.is_user_objective:  # a built-in objective sets them from all its metrics
            apply_constraints(
                attempt.trial or tracked, spec, dict(zip(spec.metrics, values, strict=True))
            )
        value = values if spec.is_multi_objective else values[0]
    if spec.is_multi_objective:
        outcome = attempt.outcome(OutcomeState.COMPLETE, values=list(value))
    else:
        value = float(value)
        if not math.isfinite(value):
            raise TrialDiverged(f"objective returned {value}", step=tracked.last_step, value=value)
        outcome = attempt.outcome(OutcomeState.COMPLETE, value=value)
    record_outcome(tracked, outcome)
    fault_point("after_return", attempt.task.trial_number, tracked.last_step or 0)
    return outcome


def _stopped(attempt: Attempt, exc: TrialStopped) -> TrialOutcome:
    """Stopped at a safe point: interrupted with the run, or preempted alone for another
    study on the pool."""
    task = attempt.task
    preempted = take_yield(task.study_dir, task.trial_number)
    if preempted is None:
        return attempt.outcome(OutcomeState.INTERRUPTED, last_step=exc.step)
    attempt.run.set_tags({tag.PREEMPTED: preempted})
    return attempt.outcome(OutcomeState.PREEMPTED, last_step=exc.step, reason=preempted)


def _paused_at(tracked: TrackedTrial | None, exc: BaseException) -> int | None:
    """The step a scheduler paused the trial at, or None when it was pruned."""
    if isinstance(exc, TrialPaused):
        return exc.step
    return tracked.paused_at if tracked is not None else None


def _paused(attempt: Attempt, tracked: TrackedTrial, step: int) -> TrialOutcome:
    """A scheduler's pause: the report at the rung (every objective's, with several) goes
    back for the scheduler to rank."""
    task, spec = attempt.task, attempt.task.spec
    outcome = attempt.outcome(OutcomeState.PAUSED, last_step=step)
    frozen = cached_trial(tracked)
    if spec.is_multi_objective:
        from hpsearch.search.pareto import step_constraints, step_values

        outcome.values = step_values(frozen).get(step)
        outcome.extra["constraints"] = step_constraints(
            frozen, step, spec.constraints, spec.metrics
        )
    else:
        outcome.value = frozen.intermediate_values.get(step)
    attempt.run.set_tags({tag.PAUSED_AT: step})
    fault_point("in_pause", task.trial_number, step, study_dir=task.study_dir)
    if task.snapshot_pauses:  # kept for the continuations of this epoch
        from hpsearch.trial import snapshot

        snapshot(task.checkpoint_dir, task.trial_number, step)
    return outcome


def _pruned(attempt: Attempt, exc: optuna.TrialPruned) -> TrialOutcome:
    """Pruned: the pruner's decision (its step, value and reason) on the run, or the
    objective's own ``TrialPruned`` where it raised one without asking."""
    tracked = attempt.tracked
    decision = tracked.prune_decision if tracked is not None else None
    if decision is None:  # pruned without asking should_prune
        said = f" ({exc})" if str(exc) else ""
        decision = {
            "step": tracked.last_step if tracked is not None else None,
            "value": None,
            "reason": f"the objective raised TrialPruned{said}",
        }
    tags = {tag.PRUNE_REASON: decision["reason"]}
    if decision["step"] is not None:
        tags[tag.PRUNE_STEP] = decision["step"]
    if decision["value"] is not None:
        tags[tag.PRUNE_VALUE] = decision["value"]
    attempt.run.set_tags(tags)
    return attempt.outcome(
        OutcomeState.PRUNED, last_step=decision["step"], reason=decision["reason"]
    )


def _failed(attempt: Attempt, exc: Exception) -> TrialOutcome:
    """Failed: the reason in one line (out of memory said so), the traceback on the run."""
    from hpsearch.training import is_oom

    if is_oom(exc) and not isinstance(exc, TrialDiverged):
        reason = f"out of memory: {exc}"
    else:
        reason = failure_reason(exc)
    tb = traceback.format_exc()
    outcome = attempt.outcome(OutcomeState.FAIL, reason=reason, error_type=type(exc).__name__)
    attempt.run.set_tags(
        {
            tag.FAIL_REASON: reason[: tag.REASON_LIMIT],
            tag.ERROR_TYPE: outcome.error_type,
            tag.ERROR_MESSAGE: str(exc)[: tag.REASON_LIMIT],
        }
    )
    attempt.run.log_text(tb, "traceback.txt")
    outcome.extra["traceback"] = tb
    return outcome
