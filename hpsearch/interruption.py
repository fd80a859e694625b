"""An interrupted study (Ctrl-C, SIGTERM): its trials in flight wait to resume.

At the first Ctrl-C the coordinator stops its trials in flight but does not end them: they
stay RUNNING in the study, with the user attribute ``hpsearch.interrupted`` set (and
``hpsearch.interruptions`` counted), and are not part of the budget. Their MLflow runs are
ended KILLED with the tag ``hpsearch.interrupted=true``, so no run is left RUNNING in
between. The next ``hpsearch run`` of the study runs them again, from their last checkpoint
(built-in trials checkpoint at the end of each epoch; a user objective through
:meth:`~hpsearch.trial.TrialContext.save_checkpoint`), in the same MLflow run, and asks only
for the trials still missing.

An interruption is not a lost worker: its starts are not counted against
``search.max_retries``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from hpsearch._optuna import trial_id_of
from hpsearch.tracking import _tags as tag

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

    from hpsearch.tracking import TrackingTarget

log = logging.getLogger(__name__)


def mark_interrupted(storage: BaseStorage, trial_ids: Iterable[int]) -> None:
    """Record in the study that these (RUNNING) trials were interrupted, to resume later."""
    for trial_id in trial_ids:
        try:
            count = int(storage.get_trial(trial_id).user_attrs.get(tag.INTERRUPTIONS, 0))
            storage.set_trial_user_attr(trial_id, tag.INTERRUPTIONS, count + 1)
            storage.set_trial_user_attr(trial_id, tag.INTERRUPTED, True)
        except Exception as exc:  # the storage is gone: the trial is RUNNING, it resumes anyway
            log.debug("trial id %d not marked interrupted: %s", trial_id, exc)


def clear_interrupted(storage: BaseStorage, trials: Iterable[FrozenTrial]) -> None:
    """The interrupted trials among ``trials`` run on now: their attribute says so."""
    for trial in trials:
        if trial.user_attrs.get(tag.INTERRUPTED):
            storage.set_trial_user_attr(trial_id_of(trial), tag.INTERRUPTED, False)


def interruptions(attrs: dict[str, Any]) -> int:
    """How many of a trial's starts ended in an interruption (from its user attributes)."""
    try:
        return int(attrs.get(tag.INTERRUPTIONS, 0))
    except (TypeError, ValueError):
        return 0


def close_interrupted_runs(
    client: MlflowClient, target: TrackingTarget, trials: Iterable[FrozenTrial]
) -> int:
    """End the MLflow runs of the interrupted trials KILLED, tagged ``hpsearch.interrupted``;
    return how many. A trial without a run yet gets none (it opens one when it resumes)."""
    from mlflow.entities import RunTag

    from hpsearch.tracking import find_trial_runs

    waiting = [t.number for t in trials if t.user_attrs.get(tag.INTERRUPTED)]
    if not waiting:
        return 0
    runs = find_trial_runs(client, target)
    closed = 0
    for number in waiting:
        run = runs.get(number)
        if run is None:
            continue
        client.log_batch(
            run.info.run_id,
            tags=[RunTag(tag.INTERRUPTED, "true"), RunTag(tag.STATE, "INTERRUPTED")],
        )
        client.update_run(
            run.info.run_id, status="KILLED", name=f"{tag.run_name(number)} interrupted"
        )
        closed += 1
    return closed
