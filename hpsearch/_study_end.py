"""The end of a study's run in MLflow: every trial's run closed with its true state, the
study's run with its summary."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hpsearch.tracking import tag

if TYPE_CHECKING:
    import optuna

    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.study")  # the logger it always had


def close_tracking(
    tracker: Any, study: optuna.Study, best: Any, status: str, spec: StudySpec
) -> None:
    """Close every trial's run with its true state and record the summary on the study's run."""
    from hpsearch.interruption import close_interrupted_runs

    trials = study.get_trials(deepcopy=False)
    tracker.reconcile(trials)
    # Trials an interruption left to resume: their runs end KILLED, tagged to say so.
    close_interrupted_runs(tracker.client, tracker.target, trials)
    if best is not None:
        try:
            tracker.copy_best_images(best.number)
        except Exception as exc:  # a missing picture must not fail a finished study
            log.warning("could not copy the best trial's images: %s", exc)
    tracker.finish(
        status=status,
        tags={
            tag.BEST_TRIAL: best.number if best else "none",
            tag.N_ENDED: sum(t.state.is_finished() for t in trials),
        },
        metrics={f"best_{spec.metric}": best.value} if best else {},
    )
    if spec.is_multi_objective:
        from hpsearch.pareto import mark_pareto_runs

        mark_pareto_runs(tracker, study, spec.metrics)
