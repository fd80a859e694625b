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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from hpsearch.exceptions import TrialDiverged
from hpsearch.pruning import explain_prune
from hpsearch.storage import ProxyAddress, proxy_client
from hpsearch.tracking import TrackingTarget, TrialRun

if TYPE_CHECKING:
    from hpsearch.spec import StudySpec

log = logging.getLogger(__name__)

#: The CPU threads of a worker (or of a rank process), set by its layout.
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
    size: int | None = None  # devices of this trial (when gpus_per_trial is searched)
    #: The objective itself, where it cannot be imported by name on the workers (a function
    #: defined in a notebook): Dask ships it by value (cloudpickle).
    objective: Callable[..., float] | None = None
    #: The database URL, where workers open the study directly (cluster.storage_access: direct).
    storage_url: str | None = None


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
        devices: this rank's torch devices (``["cuda:0"]`` or ``["cpu"]``).
        device_ids: every device of the trial's set, physical (``["cuda:2", "cuda:3"]``,
            or CPU slots ``["slot:0", "slot:1"]``).
        rank, world_size: this process's place in a data-parallel trial (0 and 1 alone).
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
    run: TrialRun | None
    rank: int = 0
    world_size: int = 1
    device_ids: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        """This rank's torch device (``cuda:0``, ``cpu``, ...)."""
        return self.devices[0]

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that reports and logs."""
        return self.rank == 0

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics to the trial's MLflow run at ``step`` (non-blocking; rank 0 only)."""
        if self.run is not None:
            self.run.log_metrics(metrics, step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        if self.run is not None:
            self.run.log_params(params)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self.run is not None:
            self.run.set_tags(tags)

    def log_image(self, image: Any, artifact_file: str) -> None:
        """Log an ``H x W x 3`` uint8 image as an artifact of the trial's run (rank 0 only)."""
        if self.run is not None:
            self.run.log_image(image, artifact_file)


class TrackedTrial(optuna.Trial):
    """An :class:`optuna.Trial` whose reports and prune decisions also land in MLflow.

    A step that an earlier attempt of the trial already reported is skipped (no duplicate
    in Optuna or in MLflow), and a non-finite value is never reported: it raises
    :class:`~hpsearch.exceptions.TrialDiverged` instead, so the pruner never sees a NaN.
    """

    def __init__(
        self, study: optuna.Study, trial_id: int, *, run: TrialRun, metric: str, pruner_name: str
    ) -> None:
        super().__init__(study, trial_id)
        self._run = run
        self._metric = metric
        self._pruner_name = pruner_name
        self.last_step: int | None = max(
            self._cached_frozen_trial.intermediate_values, default=None
        )
        self.prune_decision: dict[str, Any] | None = None
        self._reports: list[Future[None]] = []
        for step, value in sorted(self._cached_frozen_trial.intermediate_values.items()):
            # Reports of an earlier attempt: MLflow gets them again in case that attempt's
            # write was lost with its worker (the run skips the steps it already holds).
            if math.isfinite(value):
                run.log_metrics({metric: value}, step)

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
            return  # reported by an earlier attempt: the study keeps that value
        self._cached_frozen_trial.intermediate_values[step] = value
        self._reports.append(
            _report_writer().submit(
                self.storage.set_trial_intermediate_value, self._trial_id, step, value
            )
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
                self.study,
                self._cached_frozen_trial,
                self.last_step,
                value,
                pruner_name=self._pruner_name,
                metric=self._metric,
            )
            self.prune_decision = {"step": self.last_step, "value": value, "reason": reason}
        return decision


def _report_writer() -> ThreadPoolExecutor:
    """One thread per process sends reports to the study, in order."""
    from hpsearch._threads import ordered_executor

    return ordered_executor("hpsearch-report")


# Per-process caches: a worker runs many trials of the same study.
_studies: dict[tuple[str, str], optuna.Study] = {}
_studies_lock = threading.Lock()


def _worker_study(task: TrialTask) -> optuna.Study:
    from hpsearch.pruning import build_pruner
    from hpsearch.sampling import build_sampler

    key = (task.storage_url or f"{task.proxy.host}:{task.proxy.port}", task.study_name)
    with _studies_lock:
        study = _studies.get(key)
        if study is None:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.load_study(
                study_name=task.study_name,
                storage=task.storage_url or proxy_client(task.proxy),
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


def _objective(task: TrialTask) -> Callable[..., float]:
    if task.objective is not None:
        return task.objective
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


@dataclass(frozen=True)
class WorkerDevices:
    """The devices a worker owns, from its environment (set by its layout, or by hand)."""

    kind: str  # "cuda" | "cpu"
    ids: tuple[int, ...]  # physical GPU indices, or CPU slot ids
    threads: int  # CPU threads of the whole worker
    lease: bool  # trials of different sizes lease subsets of ``ids``

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerDevices:
        """Read ``HPSEARCH_DEVICE_*``; a plain ``dask worker`` with ``CUDA_VISIBLE_DEVICES`` works too.

        Example:
            >>> WorkerDevices.from_env({"CUDA_VISIBLE_DEVICES": "2,3", "HPSEARCH_THREADS": "8"})
            WorkerDevices(kind='cuda', ids=(2, 3), threads=8, lease=False)
            >>> WorkerDevices.from_env({}).kind
            'cpu'
        """
        env = os.environ if env is None else env
        visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
        kind = env.get("HPSEARCH_DEVICE_KIND") or ("cuda" if visible and visible != "-1" else "cpu")
        raw = env.get("HPSEARCH_DEVICE_IDS") or (visible if kind == "cuda" else "0")
        ids = tuple(int(x) for x in raw.split(",") if x.strip().lstrip("-").isdigit())
        return cls(
            kind,
            ids or (0,),
            int(env.get(ENV_THREADS) or _cores()),
            env.get("HPSEARCH_LEASE") == "1",
        )

    def label(self, ids: Sequence[int]) -> str:
        return ",".join(f"{'cuda' if self.kind == 'cuda' else 'slot'}:{i}" for i in ids)

    def local_device(self, device_id: int) -> str:
        """The torch device of ``device_id`` inside this worker process."""
        if self.kind != "cuda":
            return "cpu"
        return f"cuda:{self.ids.index(device_id)}"


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_allocators: dict[tuple[int, ...], Any] = {}


def _allocator(devices: WorkerDevices) -> Any:
    from hpsearch.cluster import DeviceAllocator

    with _studies_lock:
        alloc = _allocators.get(devices.ids)
        if alloc is None:
            links = None
            if devices.kind == "cuda":
                from hpsearch.cluster import nvml_links

                links = nvml_links(list(devices.ids))
            alloc = _allocators[devices.ids] = DeviceAllocator(devices.ids, links)
        return alloc


def trial_size(task: TrialTask) -> int:
    """How many devices this trial trains across."""
    return int(task.size or task.spec.objective.gpus_per_trial or 1)


def run_trial(task: TrialTask) -> TrialOutcome:
    """Run one trial on this worker's devices and say how it ended (never raises for the trial)."""
    devices = WorkerDevices.from_env()
    size = trial_size(task)
    if devices.lease:
        ids = _allocator(devices).lease(size, owner=f"trial {task.trial_number}")
    else:
        ids = devices.ids[:size]
    try:
        per_device = max(1, devices.threads // max(1, len(devices.ids)))
        if size == 1 and task.spec.objective.trial_timeout is None:
            # In the worker's own process: no start-up at all. A trial with a time limit
            # runs in a rank process instead, which can be killed when the limit passes.
            threads = devices.threads if not devices.lease else per_device
            return execute(
                task,
                devices=devices,
                device_ids=list(ids),
                local=[devices.local_device(ids[0])],
                n_threads=threads,
            )
        return _run_ranks(
            task,
            devices,
            list(ids),
            per_device if size > 1 else (devices.threads if not devices.lease else per_device),
        )
    finally:
        if devices.lease:
            _allocator(devices).release(ids)


def _run_ranks(
    task: TrialTask, devices: WorkerDevices, ids: list[int], threads: int
) -> TrialOutcome:
    from hpsearch.training._ranks import rank_pool

    start = time.perf_counter()
    result, failure = rank_pool().run(
        {"task": task, "kind": devices.kind, "device_ids": ids, "worker": _worker_address()},
        kind=devices.kind,
        device_ids=ids,
        threads=threads,
        timeout=task.spec.objective.trial_timeout,
    )
    if failure is None and isinstance(result, TrialOutcome):
        result.worker = _worker_address()
        return result
    # A rank failed (or rank 0 could not say): close the trial's run with the reason.
    first, _, tb = (failure.reason if failure else "rank 0 returned no result").partition("\n")
    timed_out = failure is not None and failure.rank == -1
    if timed_out:
        first = f"{first} (objective.trial_timeout); its processes were killed"
    outcome = TrialOutcome(
        task.trial_number,
        "FAIL",
        reason=first,
        error_type="TrialTimeout" if timed_out else "RankFailure",
        worker=_worker_address(),
        pid=os.getpid(),
        duration_s=time.perf_counter() - start,
    )
    run = TrialRun(task.tracking, task.trial_number, tags={}, resume=True)
    run.set_tags(
        {
            "hpsearch.fail_reason": first[:5000],
            "hpsearch.error_type": outcome.error_type,
            "hpsearch.error_message": first[:5000],
        }
    )
    if tb:
        run.log_text(tb, "traceback.txt")
    run.finish("FAIL")
    return outcome


ATTEMPT_ATTR = "hpsearch.attempt"


def _count_attempt(study: optuna.Study, trial_id: int) -> int:
    """Record one more start of this trial in the study; return its number (1 the first time).

    The coordinator reads it when a worker is lost, so that losses are counted even where
    Dask itself retried the task on another worker first.
    """
    attrs = study._storage.get_trial(trial_id).user_attrs
    attempt = int(attrs.get(ATTEMPT_ATTR, 0)) + 1
    study._storage.set_trial_user_attr(trial_id, ATTEMPT_ATTR, attempt)
    return attempt


def execute(
    task: TrialTask,
    *,
    devices: WorkerDevices,
    device_ids: list[int],
    local: list[str],
    n_threads: int,
    rank: int = 0,
    world_size: int = 1,
    worker: str | None = None,
) -> TrialOutcome:
    """Run the objective in this process: the trial's only rank, or its rank 0."""
    start = time.perf_counter()
    worker, pid = worker or _worker_address(), os.getpid()
    spec = task.spec
    outcome = TrialOutcome(task.trial_number, "FAIL", worker=worker, pid=pid)
    try:
        study = _worker_study(task)
        attempt = _count_attempt(study, task.trial_id)
    except Exception:  # the study is unreachable: the run below records why
        study, attempt = None, 1
    resumed = task.resume or attempt > 1
    run = TrialRun(
        task.tracking,
        task.trial_number,
        tags={
            "hpsearch.worker": worker,
            "hpsearch.pid": pid,
            "hpsearch.devices": devices.label(device_ids),
            "hpsearch.world_size": world_size,
            "hpsearch.attempt": attempt,
        },
        resume=resumed,
    )
    tracked: TrackedTrial | None = None
    try:
        if study is None:
            study = _worker_study(task)
        tracked = TrackedTrial(
            study, task.trial_id, run=run, metric=spec.metric, pruner_name=spec.search.pruner.name
        )
        trial: Any = (
            tracked if world_size == 1 else DistributedTrial(tracked, number=task.trial_number)
        )
        run.log_params({**spec.objective.params, **tracked.params})
        ctx = TrialContext(
            spec=spec,
            trial_number=task.trial_number,
            devices=local,
            n_threads=n_threads,
            study_dir=Path(task.study_dir),
            checkpoint_dir=Path(task.study_dir) / "checkpoints",
            worker=worker,
            resumed=resumed,
            run=run,
            rank=rank,
            world_size=world_size,
            device_ids=devices.label(device_ids).split(","),
        )
        objective = _objective(task)
        if "torch" in sys.modules:  # Dask workers start with OMP/MKL at one thread
            sys.modules["torch"].set_num_threads(ctx.n_threads)
        value = objective(trial, ctx) if _wants_context(objective) else objective(trial)
        value = float(value)  # type: ignore[arg-type]
        if not math.isfinite(value):
            raise TrialDiverged(f"objective returned {value}", step=tracked.last_step, value=value)
        outcome.state, outcome.value = "COMPLETE", value
    except optuna.TrialPruned as exc:
        outcome.state = "PRUNED"
        decision = tracked.prune_decision if tracked is not None else None
        if decision is None:  # pruned without asking should_prune
            step = tracked.last_step if tracked is not None else None
            decision = {
                "step": step,
                "value": None,
                "reason": f"the objective raised TrialPruned ({exc})"
                if str(exc)
                else "the objective raised TrialPruned",
            }
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
        run.set_tags(
            {
                "hpsearch.fail_reason": outcome.reason[:5000],
                "hpsearch.error_type": outcome.error_type,
                "hpsearch.error_message": str(exc)[:5000],
            }
        )
        run.log_text(tb, "traceback.txt")
        outcome.extra["traceback"] = tb
    if tracked is not None:
        try:
            tracked.flush_reports()  # every report is in the study before the coordinator tells
        except Exception as exc:
            outcome.state, outcome.value = "FAIL", None
            outcome.reason = f"could not report to the study: {type(exc).__name__}: {exc}"
        outcome.last_step = (
            outcome.last_step if outcome.last_step is not None else tracked.last_step
        )
        run.log_params(tracked.params)  # parameters suggested inside the objective
    outcome.duration_s = time.perf_counter() - start
    run.finish(outcome.state)
    return outcome


class DistributedTrial:
    """The trial as every rank of a data-parallel trial sees it.

    Rank 0 holds the real (tracked) trial; the others hold none. Suggestions and prune
    decisions are made on rank 0 and broadcast, so every rank trains the same parameters
    and all of them stop at the same step. Reports are made by rank 0 alone (the values
    are already averaged across ranks).
    """

    def __init__(self, inner: TrackedTrial | None, *, number: int) -> None:
        self._inner = inner
        self.number = number
        self._params: dict[str, Any] = {}

    @staticmethod
    def _bcast(value: Any) -> Any:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _suggest(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
        value = (
            getattr(self._inner, f"suggest_{kind}")(name, *args, **kwargs)
            if self._inner is not None
            else None
        )
        value = self._bcast(value)
        self._params[name] = value
        return value

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float:
        return self._suggest("float", name, low, high, **kwargs)

    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int:
        return self._suggest("int", name, low, high, **kwargs)

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._suggest("categorical", name, choices)

    @property
    def params(self) -> dict[str, Any]:
        return self._inner.params if self._inner is not None else dict(self._params)

    def report(self, value: float, step: int) -> None:
        if self._inner is not None:
            self._inner.report(value, step)
        elif not math.isfinite(float(value)):
            raise TrialDiverged(f"value is {value} at step {step}", step=step, value=value)

    def should_prune(self) -> bool:
        return bool(self._bcast(self._inner.should_prune() if self._inner is not None else None))

    def already_reported(self, step: int) -> bool:
        return self._inner.already_reported(step) if self._inner is not None else False

    def set_user_attr(self, key: str, value: Any) -> None:
        if self._inner is not None:
            self._inner.set_user_attr(key, value)


def run_rank(payload: dict[str, Any]) -> TrialOutcome | None:
    """One rank of a data-parallel trial, in a rank process: join the group, train, leave."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    task: TrialTask = payload["task"]
    rank, world = int(payload["rank"]), int(payload["world_size"])
    kind = payload["kind"]
    threads = int(os.environ.get(ENV_THREADS) or 1)
    torch.set_num_threads(threads)
    if kind == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl" if kind == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{payload['master_port']}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    try:
        local = ["cuda:0" if kind == "cuda" else "cpu"]
        devices = WorkerDevices(kind, tuple(payload["device_ids"]), threads, False)
        if rank == 0:
            outcome = execute(
                task,
                devices=devices,
                device_ids=list(devices.ids),
                local=local,
                n_threads=threads,
                rank=0,
                world_size=world,
                worker=payload.get("worker"),
            )
            from hpsearch.tracking import flush, spool

            # This process may be ended with its pool: leave nothing unwritten, or else on disk.
            if flush(60.0):
                spool(Path(task.study_dir) / "tracking-backlog")
            return outcome
        _follow(
            task,
            local=local,
            n_threads=threads,
            rank=rank,
            world_size=world,
            labels=devices.label(devices.ids).split(","),
        )
        return None
    finally:
        dist.destroy_process_group()


def _follow(
    task: TrialTask,
    *,
    local: list[str],
    n_threads: int,
    rank: int,
    world_size: int,
    labels: list[str],
) -> None:
    ctx = TrialContext(
        spec=task.spec,
        trial_number=task.trial_number,
        devices=local,
        n_threads=n_threads,
        study_dir=Path(task.study_dir),
        checkpoint_dir=Path(task.study_dir) / "checkpoints",
        worker="",
        resumed=task.resume,
        run=None,
        rank=rank,
        world_size=world_size,
        device_ids=labels,
    )
    objective = _objective(task)
    trial = DistributedTrial(None, number=task.trial_number)
    try:
        objective(trial, ctx) if _wants_context(objective) else objective(trial)
    except (optuna.TrialPruned, TrialDiverged):
        pass  # rank 0 records the decision


def flush_tracking(timeout: float | None = None) -> int:
    """Wait for this worker's pending MLflow writes (run on every worker at the end of a study)."""
    from hpsearch.tracking import flush, flush_timeout

    return flush(flush_timeout() if timeout is None else timeout)


def spool_tracking(folder: str) -> int:
    """Save this worker's MLflow writes that could not be made to ``folder``; return how many runs."""
    from hpsearch.tracking import spool

    return spool(folder)
