"""An interrupted study (Ctrl-C, SIGTERM): its trials in flight wait to resume.

At the first Ctrl-C the coordinator stops its trials in flight but does not end them: they
stay RUNNING in the study, with the user attribute ``hpsearch.interrupted`` set (and
``hpsearch.interruptions`` counted), and are not part of the budget. Their MLflow runs are
ended KILLED with the tag ``hpsearch.interrupted=true``, so no run is left RUNNING in
between. The next ``hpsearch run`` of the study runs them again, from their last checkpoint
(built-in trials checkpoint at the end of each epoch; a user objective through
:meth:`~hpsearch.trial._types.TrialContext.save_checkpoint`), in the same MLflow run, and asks only
for the trials still missing.

An interruption is not a lost worker: its starts are not counted against
``search.max_retries``.

The trials in flight stop at their next safe point rather than being killed: the first
Ctrl-C writes the file ``RUN_DIR/NAME/stop-requested`` (:func:`request_stop`), which every
trial looks at there (:func:`stop_requested`: a built-in trial at the end of each epoch, a
user objective at each ``trial.report``). A trial that sees it writes its checkpoint and
returns at once, unended (:class:`~hpsearch.trial._stop.TrialStopped`); the
coordinator waits :data:`STOP_WAIT_S` at most for them. The next run removes the file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.search import trial_id_of
from hpsearch.tracking import tag
from hpsearch.trial import STOP_FILE, YIELD_DIR, stop_requested

__all__ = [
    "STOP_FILE",
    "STOP_WAIT_S",
    "clear_interrupted",
    "clear_stop",
    "close_interrupted_runs",
    "interruptions",
    "mark_interrupted",
    "request_stop",
    "stop_in_flight",
    "stop_requested",
]

if TYPE_CHECKING:
    from distributed import Future
    from mlflow import MlflowClient
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

    from hpsearch.tracking import TrackingTarget

log = logging.getLogger(__name__)

#: Seconds an interrupted coordinator waits for its trials in flight to reach their next
#: safe point (an epoch's end, a report) before it stops them anyway.
STOP_WAIT_S = 120.0


def request_stop(study_dir: str | os.PathLike[str]) -> None:
    """Ask every trial of the study in flight to stop at its next safe point."""
    path = Path(study_dir) / STOP_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as exc:  # the trials are stopped the hard way instead
        log.warning("could not ask the trials to stop (%s): %s", path, exc)


def stop_in_flight(
    in_flight: dict[Future, Any], study_dir: str | os.PathLike[str], *, wait_s: float | None = None
) -> Iterator[tuple[Any, Any]]:
    """Ask the trials in flight to stop, wait for them (:data:`STOP_WAIT_S` at most), and
    yield ``(info, outcome)`` for each one that ended meanwhile (complete, pruned, failed),
    taking it out of ``in_flight``; those that stopped unended, or did not stop in time,
    stay there (to be marked interrupted)."""
    from distributed import wait

    from hpsearch.trial import TrialOutcome

    start = time.monotonic()
    request_stop(study_dir)
    try:
        wait(list(in_flight), timeout=STOP_WAIT_S if wait_s is None else wait_s)
    except TimeoutError:
        log.warning(
            "trials still in flight %.0f s after the interruption: stopped at once",
            time.monotonic() - start,
        )
    else:
        log.warning(
            "the %d trials in flight stopped %.2f s after the interruption",
            len(in_flight),
            time.monotonic() - start,
        )
    for future in [f for f in in_flight if f.status == "finished"]:
        try:
            outcome = future.result(timeout=5)
        except Exception:  # lost with its worker: it resumes
            continue
        if isinstance(outcome, TrialOutcome) and outcome.state.ends_trial:
            yield in_flight.pop(future), outcome


def clear_stop(study_dir: str | os.PathLike[str]) -> None:
    """A new run of the study: its trials run on (and none is asked to yield)."""
    (Path(study_dir) / STOP_FILE).unlink(missing_ok=True)
    for request in (Path(study_dir) / YIELD_DIR).glob("*"):
        request.unlink(missing_ok=True)


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
    """How many of a trial's starts ended in an interruption or a preemption on a shared pool
    (from its user attributes): starts that were not worker losses."""
    try:
        return int(attrs.get(tag.INTERRUPTIONS, 0)) + int(attrs.get(tag.PREEMPTIONS, 0))
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
