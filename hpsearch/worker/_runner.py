"""The trial runner: what a Dask worker executes for one trial.

A trial task carries plain values: what the coordinator decided (the trial's devices,
whether it resumes, where it pauses, whose checkpoint it continues, where checkpoints go),
where the study and the tracking store are, and the spec for the objective. The runner opens
the study through the coordinator's gRPC storage proxy, so the objective holds a real
:class:`optuna.Trial`: ``suggest_*`` returns the parameters the coordinator asked for,
``report`` and ``should_prune`` reach the study, and every report is mirrored to the trial's
MLflow run. The runner never raises for a trial's own failure: it prepares the attempt, runs
the objective, and maps how it ended to a :class:`~hpsearch.trial.TrialOutcome`
(:mod:`hpsearch.worker._outcome`); the coordinator tells Optuna.

Dask runs :func:`run_trial`, :func:`flush_tracking`, :func:`spool_tracking` on the workers.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from hpsearch.cluster import WorkerDevices, lease_devices, release_memory
from hpsearch.metrics import end_trial, trial_figures
from hpsearch.search import cached_trial
from hpsearch.spec import DeviceId
from hpsearch.storage import open_storage, proxy_client, study_known
from hpsearch.tracking import TrialRun, tag
from hpsearch.training import device_share
from hpsearch.trial import (
    DistributedTrial,
    OutcomeState,
    TrackedTrial,
    TrialContext,
    TrialOutcome,
    TrialPaused,
    TrialTask,
    ending,
    running,
)
from hpsearch.worker import warm
from hpsearch.worker._continuation import continue_parent, lineage_tags
from hpsearch.worker._outcome import Attempt, outcome_of
from hpsearch.worker._resume import ended_before, finished_values, pause_reached

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler
    from optuna.storages import BaseStorage

# Per-process caches: a worker runs many trials of the same study.
_studies: dict[tuple[str, str], tuple[BaseStorage, BaseSampler, BasePruner]] = {}
_studies_lock = threading.Lock()


def _worker_study(task: TrialTask) -> optuna.Study:
    """The study as this trial sees it: the worker's storage client, sampler and pruner (one
    each per process), in a new ``optuna.Study`` for every trial.

    A new study object, not a kept one: Optuna's samplers read the history through a cache
    that only ``Study.ask`` and ``Study.tell`` clear, and a worker calls neither (the
    coordinator asks and tells). A kept study would let every later trial of a worker thread
    sample from the history its first trial saw."""
    from hpsearch.search import build_pruner, build_sampler

    key = (task.storage_url or f"{task.proxy.host}:{task.proxy.port}", task.study_name)
    with _studies_lock:
        parts = _studies.get(key)
        if parts is None:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            parts = (
                open_storage(task.storage_url) if task.storage_url else proxy_client(task.proxy),
                # Only what an objective suggests beyond the coordinator's joint sample
                # (TrialTask.relative) is sampled here.
                build_sampler(task.spec, seed_offset=os.getpid()),
                build_pruner(task.spec),
            )
            _studies[key] = parts
    storage, sampler, pruner = parts
    if task.study_id is not None and task.directions is not None:
        study_known(storage, task.study_name, task.study_id, task.directions)
    return optuna.Study(task.study_name, storage, sampler=sampler, pruner=pruner)


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


def _objective(task: TrialTask) -> Callable[..., float]:
    if task.objective is not None:
        return task.objective
    spec = task.spec
    if spec.is_user_objective:
        from hpsearch._imports import load_user_objective

        return load_user_objective(spec.objective.model, task.search_paths)
    from hpsearch.training import builtin_objective

    return builtin_objective


def _wants_context(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def run_trial(task: TrialTask) -> TrialOutcome:
    """Run one trial on this worker's devices and say how it ended (never raises for the trial)."""
    warm.wait()  # the imports this worker started: never the same import on two threads
    try:
        with running(task.study_dir, task.trial_number):
            outcome = _run_trial(task)
        outcome.retire = ending()  # its worker's batch job ends: the coordinator retires it
        return outcome
    finally:
        release_memory()  # what Dask's malloc trim threshold was for, once a trial


def _run_trial(task: TrialTask) -> TrialOutcome:
    devices = WorkerDevices.from_env()
    size = task.devices_wanted
    with lease_devices(devices, size, owner=f"trial {task.trial_number}") as ids:
        missing = continue_parent(task)
        if missing is not None:
            return _failed_before_start(task, missing, "MissingCheckpoint")
        threads = devices.rank_threads(size)
        if (size == 1 and task.spec.objective.trial_timeout is None) or _trained_before(task):
            # In the worker's own process: no start-up at all. A trial with a time limit
            # runs in a rank process instead, which can be killed when the limit passes; one
            # that already reached its pause or its end trains nothing, so it needs no ranks.
            return execute(
                task,
                devices=devices,
                device_ids=ids,
                local=[devices.local_device(ids[0])],
                n_threads=threads,
            )
        return _run_ranks(task, devices, ids, threads)


def _trained_before(task: TrialTask) -> bool:
    """Whether an earlier attempt of this resumed trial already reached its pause or its end
    (see :mod:`hpsearch.worker._resume`): it trains nothing, so it needs no ranks."""
    if not task.resume:
        return False
    from hpsearch.search import storage_of

    storage = storage_of(_worker_study(task))
    return pause_reached(task, storage) or ended_before(task, storage)


def _run_ranks(
    task: TrialTask, devices: WorkerDevices, ids: list[DeviceId], threads: int
) -> TrialOutcome:
    from hpsearch.worker._ranks import rank_pool

    start = time.perf_counter()
    result, failure = rank_pool().run(
        {"task": task, "kind": devices.kind, "device_ids": ids, "worker": _worker_address()},
        kind=devices.kind,
        device_ids=ids,
        threads=threads,
        timeout=task.spec.objective.trial_timeout,
    )
    if isinstance(result, TrialOutcome) and (
        failure is None
        or (
            result.state is OutcomeState.FAIL
            and _peer_lost(failure.reason)
            and not _peer_lost(result.reason)
        )
    ):
        # Rank 0's own outcome; also when another rank then failed only because rank 0 left
        # their collective (rank 0 raised first: its error is the trial's reason).
        result.worker = _worker_address()
        return result
    # A rank failed (or rank 0 could not say): close the trial's run with the reason.
    first, _, tb = (failure.reason if failure else "rank 0 returned no result").partition("\n")
    timed_out = failure is not None and failure.rank == -1
    if timed_out:
        first = f"{first} (objective.trial_timeout); its processes were killed"
    outcome = TrialOutcome(
        task.trial_number,
        OutcomeState.FAIL,
        reason=first,
        error_type="TrialTimeout" if timed_out else "RankFailure",
        worker=_worker_address(),
        pid=os.getpid(),
        duration_s=time.perf_counter() - start,
    )
    run = TrialRun(task.tracking, task.trial_number, tags={}, resume=True)
    run.set_tags(
        {
            tag.FAIL_REASON: first[: tag.REASON_LIMIT],
            tag.ERROR_TYPE: outcome.error_type,
            tag.ERROR_MESSAGE: first[: tag.REASON_LIMIT],
        }
    )
    if tb:
        run.log_text(tb, "traceback.txt")
    run.finish("FAIL")
    return outcome


def _failed_before_start(task: TrialTask, reason: str, error_type: str) -> TrialOutcome:
    run = TrialRun(task.tracking, task.trial_number, tags={}, resume=True)
    run.set_tags({tag.FAIL_REASON: reason, tag.ERROR_TYPE: error_type})
    run.finish("FAIL")
    return TrialOutcome(
        task.trial_number,
        OutcomeState.FAIL,
        reason=reason,
        error_type=error_type,
        worker=_worker_address(),
        pid=os.getpid(),
    )


def _peer_lost(reason: str | None) -> bool:
    """Whether a rank's error says only that another rank left (gloo / NCCL)."""
    text = (reason or "").partition("\n")[0].lower()
    return "closed by peer" in text or "reset by peer" in text


def _count_attempt(study: optuna.Study, trial_id: int) -> int:
    """Record one more start of this trial in the study; return its number (1 the first time).

    The coordinator reads it when a worker is lost, so that losses are counted even where
    Dask itself retried the task on another worker first.
    """
    from hpsearch.search import storage_of

    storage = storage_of(study)
    attempt = int(storage.get_trial(trial_id).user_attrs.get(tag.ATTEMPT, 0)) + 1
    storage.set_trial_user_attr(trial_id, tag.ATTEMPT, attempt)
    return attempt


def execute(
    task: TrialTask,
    *,
    devices: WorkerDevices,
    device_ids: list[DeviceId],
    local: list[str],
    n_threads: int,
    rank: int = 0,
    world_size: int = 1,
    worker: str | None = None,
) -> TrialOutcome:
    """Run the objective in this process (the trial's only rank, or its rank 0) and say how
    it ended: prepare the attempt, run it, map its end to an outcome, close its run."""
    start = time.perf_counter()  # the attempt's duration counts its preparation too
    attempt = _prepare(task, devices.label(device_ids), world_size, worker)
    attempt.start = start
    place = _Place(devices, device_ids, local, n_threads, rank, world_size)
    outcome = outcome_of(attempt, lambda: _run(attempt, place))
    _finish(attempt, outcome)
    return outcome


@dataclass(frozen=True)
class _Place:
    """Where an attempt runs: its devices, threads, and rank in its trial."""

    devices: WorkerDevices
    device_ids: list[DeviceId]
    local: list[str]
    n_threads: int
    rank: int
    world_size: int


def _prepare(task: TrialTask, labels: str, world_size: int, worker: str | None) -> Attempt:
    """Count the attempt in the study and open the trial's run (resumed where it ran
    before); an unreachable study is not raised here: the run records why it failed."""
    worker, pid = worker or _worker_address(), os.getpid()
    study: optuna.Study | None = None
    try:
        study = _worker_study(task)
        attempt = _count_attempt(study, task.trial_id)
    except Exception:
        study, attempt = None, 1
    resumed = task.resume or attempt > 1
    run = TrialRun(
        task.tracking,
        task.trial_number,
        tags={
            tag.WORKER: worker,
            tag.PID: pid,
            tag.DEVICES: labels,
            tag.WORLD_SIZE: world_size,
            tag.ATTEMPT: attempt,
            **lineage_tags(task),
            **({tag.SPEC_VERSION: task.spec_version} if task.spec_version else {}),
        },
        resume=resumed,
    )
    # The trial's latest throughput, where the study's metrics poller finds it.
    figures = trial_figures(task.study_name, task.trial_number)
    return Attempt(task, run, worker, pid, study, resumed, figures)


def _own_loop(task: TrialTask) -> bool:
    """Whether the objective is the user's (not a built-in one, which has its own loop)."""
    return task.spec.is_user_objective or task.objective is not None


def _run(attempt: Attempt, place: _Place) -> Any:
    """Run the objective (or nothing, where an earlier attempt reached the end); its return."""
    task = attempt.task
    tracked = _track(attempt, place.world_size)
    if place.world_size == 1 and tracked.pause_reached():
        # Trained up to its pause already (run_trial checks a trial of several ranks).
        raise TrialPaused(int(task.stop_at or 0))
    trial = attempt.trial
    attempt.run.log_params({**task.spec.objective.params, **tracked.params})
    source = cached_trial(tracked).user_attrs.get(tag.TRANSFERRED_FROM)
    if source is not None:  # a warm start's configuration, from an earlier study
        attempt.run.set_tags({tag.TRANSFERRED_FROM: source})
    if attempt.resumed and place.world_size == 1:
        finished = finished_values(task, cached_trial(tracked))
        if finished is not None:  # it ran to its end before: nothing to train
            return finished if task.spec.is_multi_objective else finished[0]
    ctx = _context(attempt, place, reports_written=trial.flush_reports)
    objective = _objective(task)
    if "torch" in sys.modules:  # as its environment says, whatever imported torch first
        sys.modules["torch"].set_num_threads(ctx.n_threads)
    share = task.spec.trial_devices if _own_loop(task) else 1.0  # built-ins: MemoryMonitor
    with device_share(place.local[0], share):  # packed with other trials on its device
        return objective(trial, ctx) if _wants_context(objective) else objective(trial)


def _track(attempt: Attempt, world_size: int) -> TrackedTrial:
    """The trial as it reports to the study and the run; a data-parallel trial's rank 0
    wraps it so that every rank follows its decisions."""
    task, spec = attempt.task, attempt.task.spec
    if attempt.study is None:
        attempt.study = _worker_study(task)
    tracked = attempt.tracked = TrackedTrial(
        attempt.study,
        task.trial_id,
        run=attempt.run,
        metric=spec.metric,
        pruner_name=spec.search.pruner.name,
        metrics=spec.metrics,
        stop_at=task.stop_at,
        relative=task.relative,
        study_dir=task.study_dir,
        stop_on_report=_own_loop(task) and world_size == 1,
    )
    attempt.trial = (
        tracked
        if world_size == 1
        else DistributedTrial(
            tracked,
            number=task.trial_number,
            study_dir=task.study_dir,
            stop_on_report=_own_loop(task),
        )
    )
    return tracked


def _context(attempt: Attempt, place: _Place, reports_written: Callable[[], None]) -> TrialContext:
    task = attempt.task
    return TrialContext(
        spec=task.spec,
        trial_number=task.trial_number,
        devices=place.local,
        n_threads=place.n_threads,
        study_dir=Path(task.study_dir),
        checkpoint_dir=Path(task.checkpoint_dir),
        worker=attempt.worker,
        resumed=attempt.resumed,
        run=attempt.run,
        rank=place.rank,
        world_size=place.world_size,
        device_ids=place.devices.label(place.device_ids).split(","),
        stop_at=task.stop_at,
        figures=attempt.figures,
        reports_written=reports_written,
    )


def _finish(attempt: Attempt, outcome: TrialOutcome) -> None:
    """Close the attempt: its reports in the study, its parameters and duration on the run,
    the run ended with the outcome's state."""
    tracked, run, task = attempt.tracked, attempt.run, attempt.task
    if tracked is not None:
        try:
            tracked.flush_reports()  # every report is in the study before the coordinator tells
        except Exception as exc:
            outcome.state, outcome.value = OutcomeState.FAIL, None
            outcome.reason = f"could not report to the study: {type(exc).__name__}: {exc}"
        outcome.last_step = (
            outcome.last_step if outcome.last_step is not None else tracked.last_step
        )
        run.log_params(tracked.params)  # parameters suggested inside the objective
    outcome.duration_s = time.perf_counter() - attempt.start
    outcome.extra.update(attempt.figures)
    end_trial(task.study_name, task.trial_number)
    run.finish(outcome.state)
    if outcome.state.goes_on:
        # The trial goes on later, maybe on another worker, which finds its run by the trial
        # number: the run must be in the store by then (a short attempt's run is created only
        # as it ends), or the next attempt would create a second one.
        from hpsearch.tracking import flush, flush_timeout

        flush(min(30.0, flush_timeout()))


def flush_tracking(timeout: float | None = None) -> int:
    """Wait for this worker's pending MLflow writes (run on every worker at the end of a study)."""
    from hpsearch.tracking import flush, flush_timeout

    return flush(flush_timeout() if timeout is None else timeout)


def spool_tracking(folder: str) -> int:
    """Save this worker's MLflow writes that could not be made to ``folder``; return how many
    runs."""
    from hpsearch.tracking import spool

    return spool(folder)
