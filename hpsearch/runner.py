"""The trial runner: what a Dask worker executes for one trial.

A trial task carries plain values (the spec, the trial's id, where the study and the
tracking store are). The runner opens the study through the coordinator's gRPC storage
proxy, so the objective holds a real :class:`optuna.Trial`: ``suggest_*`` returns the
parameters the coordinator asked for, ``report`` and ``should_prune`` reach the study, and
every report is mirrored to the trial's MLflow run. The runner never raises for a trial's
own failure: it returns a :class:`TrialOutcome` and the coordinator tells Optuna.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import optuna

from hpsearch.exceptions import TrialDiverged
from hpsearch.pruning import explain_prune
from hpsearch.storage import ProxyAddress, proxy_client
from hpsearch.tracking import TrackingTarget, TrialRun

if TYPE_CHECKING:
    from hpsearch.spec import StudySpec

log = logging.getLogger(__name__)

#: Environment a worker gets from the cluster: the devices of its set and its CPU share.
ENV_DEVICES = "HPSEARCH_DEVICES"
ENV_THREADS = "HPSEARCH_THREADS"


@dataclass
class TrialTask:
    """Everything a worker needs to run one trial (picklable)."""

    study_name: str
    trial_id: int
    trial_number: int
    spec: StudySpec
    proxy: ProxyAddress
    tracking: TrackingTarget
    study_dir: str
    search_paths: list[str]
    resume: bool = False


@dataclass
class TrialOutcome:
    """How a trial ended, as the worker saw it."""

    trial_number: int
    state: str  # COMPLETE | PRUNED | FAIL
    value: float | None = None
    reason: str | None = None
    error_type: str | None = None
    worker: str = ""
    pid: int = 0
    duration_s: float = 0.0
    last_step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrialContext:
    """What a trial knows of where it runs; the optional second argument of an objective.

    Attributes:
        spec: the study spec.
        trial_number: the Optuna trial number.
        devices: the devices of this trial's set (``["cuda:0", "cuda:1"]`` or ``["cpu"]``).
        n_threads: the CPU threads this trial may use.
        study_dir: the study's run folder (``RUN_DIR/NAME``).
        checkpoint_dir: where this study keeps its trials' checkpoints.
        worker: the Dask worker's address.
        resumed: whether this trial ran before (a retry or a resumed study).
    """

    spec: StudySpec
    trial_number: int
    devices: list[str]
    n_threads: int
    study_dir: Path
    checkpoint_dir: Path
    worker: str
    resumed: bool
    run: TrialRun

    @property
    def device(self) -> str:
        """The first device of the set: the one a single-device trial trains on."""
        return self.devices[0]

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics to the trial's MLflow run at ``step`` (non-blocking)."""
        self.run.log_metrics(metrics, step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.run.log_params(params)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.run.set_tags(tags)


class TrackedTrial(optuna.Trial):
    """An :class:`optuna.Trial` whose reports and prune decisions also land in MLflow.

    A step that an earlier attempt of the trial already reported is skipped (no duplicate
    in Optuna or in MLflow), and a non-finite value is never reported: it raises
    :class:`~hpsearch.exceptions.TrialDiverged` instead, so the pruner never sees a NaN.
    """

    def __init__(self, study: optuna.Study, trial_id: int, *, run: TrialRun, metric: str, pruner_name: str) -> None:
        super().__init__(study, trial_id)
        self._run = run
        self._metric = metric
        self._pruner_name = pruner_name
        self.last_step: int | None = max(self._cached_frozen_trial.intermediate_values, default=None)
        self.prune_decision: dict[str, Any] | None = None
        self._reports: list[Future[None]] = []

    def already_reported(self, step: int) -> bool:
        """Whether ``step`` was reported (by this attempt or an earlier one)."""
        return int(step) in self._cached_frozen_trial.intermediate_values

    def report(self, value: float, step: int) -> None:
        """Report like :meth:`optuna.Trial.report`, with the storage write off the training loop.

        The value is in this trial's view at once (``should_prune`` sees it); the write to
        the study goes through one ordered background thread, and :meth:`flush_reports`
        (called before the trial's result is returned) waits for it.
        """
        value = float(value)
        step = int(step)
        if step < 0:
            raise ValueError(f"`{step=}` must be non-negative.")
        if not math.isfinite(value):
            raise TrialDiverged(f"{self._metric} is {value} at step {step}", step=step, value=value)
        if step in self._cached_frozen_trial.intermediate_values:
            return
        self._cached_frozen_trial.intermediate_values[step] = value
        self._reports.append(
            _report_writer().submit(self.storage.set_trial_intermediate_value, self._trial_id, step, value)
        )
        self.last_step = step
        self._run.log_metrics({self._metric: value}, step)

    def flush_reports(self) -> None:
        """Wait until every report is in the study; raise if one could not be written."""
        pending, self._reports = self._reports, []
        for future in pending:
            future.result()

    def should_prune(self) -> bool:
        decision = super().should_prune()
        if decision and self.last_step is not None:
            value = self._cached_frozen_trial.intermediate_values[self.last_step]
            reason = explain_prune(
                self.study, self._cached_frozen_trial, self.last_step, value,
                pruner_name=self._pruner_name, metric=self._metric,
            )
            self.prune_decision = {"step": self.last_step, "value": value, "reason": reason}
        return decision


_reports_executor: ThreadPoolExecutor | None = None


def _report_writer() -> ThreadPoolExecutor:
    """One thread per process sends reports to the study, in order."""
    global _reports_executor
    with _studies_lock:
        if _reports_executor is None:
            _reports_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpsearch-report")
        return _reports_executor


# Per-process caches: a worker runs many trials of the same study.
_studies: dict[tuple[str, int, str], optuna.Study] = {}
_studies_lock = threading.Lock()


def _worker_study(task: TrialTask) -> optuna.Study:
    from hpsearch.pruning import build_pruner
    from hpsearch.sampling import build_sampler

    key = (task.proxy.host, task.proxy.port, task.study_name)
    with _studies_lock:
        study = _studies.get(key)
        if study is None:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.load_study(
                study_name=task.study_name,
                storage=proxy_client(task.proxy),
                # Only objectives that suggest beyond the declared space sample here.
                sampler=build_sampler(task.spec, seed_offset=os.getpid()),
                pruner=build_pruner(task.spec),
            )
            _studies[key] = study
        return study


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


def _devices() -> list[str]:
    raw = os.environ.get(ENV_DEVICES, "cpu")
    return [d for d in raw.split(",") if d] or ["cpu"]


def _n_threads() -> int:
    raw = os.environ.get(ENV_THREADS)
    if raw:
        return max(1, int(raw))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _objective(task: TrialTask) -> Callable[..., float]:
    spec = task.spec
    if spec.is_user_objective:
        from hpsearch.spec import load_user_objective

        return load_user_objective(spec.objective.model, task.search_paths)
    from hpsearch.training._objective import builtin_objective

    return builtin_objective


def _wants_context(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def run_trial(task: TrialTask) -> TrialOutcome:
    """Run one trial to its end in this process and say how it ended."""
    start = time.perf_counter()
    worker, pid = _worker_address(), os.getpid()
    spec = task.spec
    outcome = TrialOutcome(task.trial_number, "FAIL", worker=worker, pid=pid)
    devices = _devices()
    run = TrialRun(
        task.tracking, task.trial_number,
        tags={"hpsearch.worker": worker, "hpsearch.pid": pid, "hpsearch.devices": ",".join(devices)},
        resume=task.resume,
    )
    trial: TrackedTrial | None = None
    try:
        study = _worker_study(task)
        trial = TrackedTrial(
            study, task.trial_id, run=run, metric=spec.metric, pruner_name=spec.search.pruner.name
        )
        run.log_params({**spec.objective.params, **trial.params})
        ctx = TrialContext(
            spec=spec, trial_number=task.trial_number, devices=devices, n_threads=_n_threads(),
            study_dir=Path(task.study_dir), checkpoint_dir=Path(task.study_dir) / "checkpoints",
            worker=worker, resumed=task.resume, run=run,
        )
        objective = _objective(task)
        if "torch" in sys.modules:  # Dask workers start with OMP/MKL at one thread
            sys.modules["torch"].set_num_threads(ctx.n_threads)
        value = objective(trial, ctx) if _wants_context(objective) else objective(trial)
        value = float(value)  # type: ignore[arg-type]
        if not math.isfinite(value):
            raise TrialDiverged(f"objective returned {value}", step=trial.last_step, value=value)
        outcome.state, outcome.value = "COMPLETE", value
    except optuna.TrialPruned as exc:
        outcome.state = "PRUNED"
        decision = trial.prune_decision if trial is not None else None
        if decision is None:  # pruned without asking should_prune
            step = trial.last_step if trial is not None else None
            decision = {"step": step, "value": None, "reason": f"the objective raised TrialPruned ({exc})" if str(exc) else "the objective raised TrialPruned"}
        outcome.last_step = decision["step"]
        outcome.reason = decision["reason"]
        tags = {"hpsearch.prune_reason": decision["reason"]}
        if decision["step"] is not None:
            tags["hpsearch.prune_step"] = decision["step"]
        if decision["value"] is not None:
            tags["hpsearch.prune_value"] = decision["value"]
        run.set_tags(tags)
    except Exception as exc:
        from hpsearch.training import is_oom

        outcome.error_type = type(exc).__name__
        if isinstance(exc, TrialDiverged):
            outcome.reason = f"diverged: {exc}"
        elif is_oom(exc):
            outcome.reason = f"out of memory: {exc}"
        else:
            outcome.reason = f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc()
        run.set_tags({
            "hpsearch.fail_reason": outcome.reason[:5000],
            "hpsearch.error_type": outcome.error_type,
            "hpsearch.error_message": str(exc)[:5000],
        })
        run.log_text(tb, "traceback.txt")
        outcome.extra["traceback"] = tb
    if trial is not None:
        try:
            trial.flush_reports()  # every report is in the study before the coordinator tells
        except Exception as exc:
            outcome.state, outcome.value = "FAIL", None
            outcome.reason = f"could not report to the study: {type(exc).__name__}: {exc}"
        outcome.last_step = outcome.last_step if outcome.last_step is not None else trial.last_step
        run.log_params(trial.params)  # parameters suggested inside the objective
    outcome.duration_s = time.perf_counter() - start
    run.finish(outcome.state)
    return outcome


def flush_tracking(timeout: float = 120.0) -> int:
    """Wait for this worker's pending MLflow writes (run on every worker at the end of a study)."""
    from hpsearch.tracking import flush

    return flush(timeout)
