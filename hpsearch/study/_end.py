"""The end of a study's run in MLflow: every trial's run closed with its true state, the
study's run with its summary."""

from __future__ import annotations

import logging
from pathlib import Path
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
    from hpsearch.coordinator import close_interrupted_runs
    from hpsearch.search import outcome
    from hpsearch.search.schedulers import adaptation_tags
    from hpsearch.tracking import flush, flush_timeout

    flush(flush_timeout())  # the tags written as the study went, before its end's
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
            **({tag.WARM_START_OUTCOME: line} if (line := outcome(study)) else {}),
            **adaptation_tags(study.user_attrs),
        },
        metrics={f"best_{spec.metric}": best.value} if best else {},
    )
    if spec.is_multi_objective:
        from hpsearch.search.pareto import mark_pareto_runs

        mark_pareto_runs(tracker, study, spec.metrics)


def flush_workers(client: Any, backlog: Path) -> None:
    """Wait for every worker's MLflow writes; those that cannot be made are saved in
    ``backlog`` and written on the next run of the study."""
    from hpsearch.tracking import flush_timeout
    from hpsearch.worker import flush_tracking, spool_tracking

    if sum(client.run(flush_tracking, flush_timeout()).values()):
        saved = sum(client.run(spool_tracking, str(backlog)).values())
        if saved:
            log.warning(
                "MLflow: %d trial runs could not be written (the tracking store does not "
                "answer); kept in %s and written on the next run of this study",
                saved,
                backlog,
            )
