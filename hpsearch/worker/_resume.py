"""A resumed trial that had already run to its end: it ends again at once, training nothing.

A trial can finish its work and still be RUNNING in the study: its worker, its coordinator or
the whole run stopped between its last epoch and the coordinator's ``tell``. Its next start
ends it COMPLETE with its own final values, read from

- the study: the outcome the worker recorded (:data:`~hpsearch.tracking.tag.OUTCOME`) just
  before it handed the outcome back, when the objective had returned;
- a user objective's last checkpoint, when it was saved after the final step
  (``objective.epochs``) and the study holds that step's report: the trial ends with that
  report as its value (the value its objective returns, for an objective whose value is its
  last report);
- a built-in trial's last checkpoint, of its last epoch: it holds the epoch's value (see
  :func:`hpsearch.training._objective.builtin_objective`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpsearch.tracking import tag
from hpsearch.trial import OutcomeState

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from hpsearch.trial import TrackedTrial, TrialOutcome, TrialTask


def outcome_record(outcome: TrialOutcome) -> dict[str, Any]:
    """The user attribute that keeps a complete trial's outcome in the study."""
    values = outcome.values if outcome.values is not None else [outcome.value]
    return {"state": outcome.state.value, "values": [float(v) for v in values if v is not None]}


def record_outcome(tracked: TrackedTrial, outcome: TrialOutcome) -> None:
    """Keep a complete trial's outcome in the study before it is handed back."""
    tracked.queue_user_attr(tag.OUTCOME, outcome_record(outcome))
    tracked.flush_reports()


def finished_values(task: TrialTask, frozen: FrozenTrial) -> list[float] | None:
    """The final values of a trial that already ran to its end (None: it has work left)."""
    recorded = frozen.user_attrs.get(tag.OUTCOME)
    if isinstance(recorded, dict) and recorded.get("state") == OutcomeState.COMPLETE.value:
        return [float(v) for v in recorded["values"]]
    spec = task.spec
    if not (spec.is_user_objective or task.objective is not None):
        return None  # a built-in trial reads its last epoch's value from its checkpoint
    step = _checkpointed_step(task)
    if step is None or step < int(spec.objective.epochs):
        return None
    if len(spec.metrics) > 1:
        from hpsearch.search.pareto import step_values

        values = step_values(frozen).get(step)
        return None if values is None else [float(v) for v in values]
    value = frozen.intermediate_values.get(step)
    return None if value is None else [float(value)]


def _checkpointed_step(task: TrialTask) -> int | None:
    """The step of a user objective's last checkpoint (``ctx.save_checkpoint(state, step)``)."""
    from hpsearch.trial import CheckpointStore

    store = CheckpointStore(task.checkpoint_dir, task.trial_number)
    if not (store.latest.exists() or store.previous.exists()):
        return None  # no torch import for a trial that never saved one
    saved = store.load()
    step = saved.get("step") if isinstance(saved, dict) else None
    return int(step) if isinstance(step, int) else None


def pause_reached(task: TrialTask, storage: Any) -> bool:
    """Whether an earlier attempt of this resumed trial already reported the step it is to
    pause at (its coordinator stopped before it heard of the pause, and a new one sent it
    again): it pauses there again and trains nothing, rather than train past its rung."""
    from hpsearch.trial import step_reported

    if not task.resume or task.stop_at is None:
        return False
    try:
        frozen = storage.get_trial(task.trial_id)
    except Exception:  # the study is unreachable: the trial's own run records why
        return False
    return step_reported(frozen, task.stop_at, several=len(task.spec.metrics) > 1)


def ended_before(task: TrialTask, storage: Any) -> bool:
    """Whether this resumed trial already ran to its end (so it needs no rank processes)."""
    if not task.resume:
        return False
    try:
        frozen = storage.get_trial(task.trial_id)
    except Exception:  # the study is unreachable: the trial's own run records why
        return False
    return finished_values(task, frozen) is not None
