"""The plain types of a trial: what a worker is handed, what it hands back, what an
objective knows of where it runs.

A leaf module: it imports nothing heavy and no other part of hpsearch at import time, so the
coordinator, the worker-side runner (:mod:`hpsearch.worker._runner`) and user code can
all depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.trial._stop import TrialStopped, yield_requested

if TYPE_CHECKING:
    from optuna.trial import TrialState

    from hpsearch.spec import StudySpec
    from hpsearch.storage import ProxyAddress
    from hpsearch.tracking import TrackingTarget, TrialRun


class OutcomeState(str, Enum):
    """How a trial's attempt on a worker ended.

    Three end the trial in the study (:attr:`COMPLETE`, :attr:`PRUNED`, :attr:`FAIL`, as
    Optuna's ``TrialState`` of the same names); three leave it to run again later:
    :attr:`PAUSED` (a scheduler's pause, at ``last_step``), :attr:`INTERRUPTED` (the run
    asked its trials to stop) and :attr:`PREEMPTED` (it yielded its devices to another study
    of the pool). A ``str`` enum: the MLflow tag ``hpsearch.state`` holds its value.
    """

    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"
    PAUSED = "PAUSED"
    INTERRUPTED = "INTERRUPTED"
    PREEMPTED = "PREEMPTED"

    def __str__(self) -> str:
        return self.value

    @property
    def ends_trial(self) -> bool:
        """Whether the study is told of it (the trial does not run again)."""
        return self in _ENDING

    @property
    def told(self) -> TrialState:
        """The state the study is told (COMPLETE, PRUNED or FAIL)."""
        from optuna.trial import TrialState

        if not self.ends_trial:
            raise ValueError(f"a {self.value} trial goes on: the study is told nothing")
        return TrialState[self.value]

    @classmethod
    def of(cls, state: TrialState) -> OutcomeState:
        """The outcome of a trial ended in the study as ``state``."""
        return cls(state.name)

    @property
    def goes_on(self) -> bool:
        """Whether the trial runs again later from its checkpoint (paused, interrupted or
        preempted)."""
        return not self.ends_trial


_ENDING = frozenset({OutcomeState.COMPLETE, OutcomeState.PRUNED, OutcomeState.FAIL})


@dataclass
class TrialTask:
    """Everything a worker needs to run one trial (picklable).

    What the coordinator decided travels as plain values (the devices of the trial, whether
    it resumes, where it pauses, whose checkpoint it continues, where checkpoints go): the
    worker acts on them and never derives them again from :attr:`spec`, which is there for
    the objective (:attr:`TrialContext.spec`).
    """

    study_name: str
    trial_id: int
    trial_number: int
    spec: StudySpec
    proxy: ProxyAddress
    tracking: TrackingTarget
    study_dir: str
    search_paths: list[str]
    resume: bool = False
    size: float | None = None  # devices of this trial (searched, or a fraction of one)
    #: The objective itself, where it cannot be imported by name on the workers (a function
    #: defined in a notebook): Dask ships it by value (cloudpickle).
    objective: Callable[..., float] | None = None
    #: The database URL, where workers open the study directly (cluster.storage_access: direct).
    storage_url: str | None = None
    #: The epoch (step) to pause at, with the checkpoint written (``search.scheduler``).
    stop_at: int | None = None
    #: The study's id and directions in its storage, as the coordinator knows them: a
    #: worker builds its ``optuna.Study`` for the trial without asking the storage for them.
    study_id: int | None = None
    directions: list[Any] | None = None
    #: What the coordinator's sampler drew for the trial jointly (Optuna's relative search
    #: space) beyond the parameters it asked for: name -> (distribution, value). The
    #: objective's suggest of one of them takes it; a worker samples only the rest.
    relative: dict[str, tuple[Any, Any]] | None = None
    #: The version of the study's spec the trial runs under (see :mod:`hpsearch.search._carry`).
    spec_version: int | None = None
    #: The folder of the study's checkpoints (:attr:`hpsearch.trial.RunLayout.checkpoints`;
    #: by default the one of :attr:`study_dir`).
    checkpoint_dir: str = ""
    #: Population-based training: the trial and epoch whose checkpoint this trial continues
    #: (None: it starts from its own, or from scratch).
    lineage: tuple[int, int] | None = None
    #: Whether a pause keeps a snapshot of the checkpoint at its epoch (population-based
    #: training: the continuations of that epoch copy it).
    snapshot_pauses: bool = False

    def __post_init__(self) -> None:
        if not self.checkpoint_dir:
            from hpsearch.trial._layout import RunLayout

            self.checkpoint_dir = str(RunLayout.of_study_dir(self.study_dir).checkpoints)

    @property
    def devices_wanted(self) -> int:
        """How many devices the trial trains across (a fraction of one device is one)."""
        return max(1, int(self.size or 1))


@dataclass
class TrialOutcome:
    """How a trial ended, as the worker saw it."""

    trial_number: int
    state: OutcomeState  # PAUSED: at step last_step, value its report there
    value: float | None = None
    #: A multi-objective trial's values, one per metric (``value`` is then None).
    values: list[float] | None = None
    reason: str | None = None
    error_type: str | None = None
    worker: str = ""
    pid: int = 0
    duration_s: float = 0.0
    last_step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The worker is going away (its batch job ends): the coordinator retires it before it
    #: places another trial, so that none lands there.
    retire: bool = False

    def __post_init__(self) -> None:
        self.state = OutcomeState(self.state)  # its name, from a caller that wrote it


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
        resumed: whether this trial ran before (a retry or a resumed study), or starts from
            another trial's checkpoint (population-based training).
        stop_at: the step at which a scheduler pauses this trial (None: no pause).
        figures: the trial's latest ``samples_per_s`` and ``epoch_s``, as it logged them (the
            study's metrics show them).

    A user objective that runs under ``search.scheduler`` (asha or pbt) needs two calls:
    :meth:`load_checkpoint` once at the start, and :meth:`save_checkpoint` after each
    report, before ``trial.should_prune()``; at the pause step that ``should_prune()``
    returns True, and the objective raises ``optuna.TrialPruned`` as for a pruned trial.
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
    stop_at: int | None = None
    figures: dict[str, float] = field(default_factory=dict)
    #: Waits until the study holds the trial's reports so far (set by the trial runner):
    #: :meth:`save_checkpoint` calls it first, so a checkpoint is never ahead of them.
    reports_written: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def device(self) -> str:
        """This rank's torch device (``cuda:0``, ``cpu``, ...)."""
        return self.devices[0]

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that reports and logs."""
        return self.rank == 0

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics to the trial's MLflow run at ``step`` (non-blocking; rank 0 only).

        ``samples_per_s`` and ``epoch_s`` among them are also the trial's throughput in the
        study's metrics (the built-in training loop logs both each epoch)."""
        for key in ("samples_per_s", "epoch_s"):
            if key in metrics:
                self.figures[key] = float(metrics[key])
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

    def pauses_at(self, step: int) -> bool:
        """Whether a scheduler pauses this trial after ``step``."""
        return self.stop_at is not None and int(step) >= self.stop_at

    def save_checkpoint(self, state: Mapping[str, Any], step: int | None = None) -> None:
        """Save the trial's state (rank 0 writes; other ranks return), so that a trial run
        again (its worker lost, the study interrupted, a scheduler's promotion) goes on
        from here.

        ``state`` is any picklable mapping (model and optimizer ``state_dict()``, the step);
        :meth:`load_checkpoint` returns it. Given the ``step`` it was saved after, it is
        written in the background, except at the step the trial pauses at; without one it is
        on disk when this returns.
        """
        if not self.is_main:
            return
        # Reports reach the study from a background thread: a checkpoint written before
        # them could, were the trial killed right then, resume it after a step the study
        # never got (a resumed trial does not report a step twice).
        if self.reports_written is not None:
            self.reports_written()
        from hpsearch.trial import _faults

        background = step is not None and not self.pauses_at(step)
        store = self._store()
        store.save(
            {"step": None if step is None else int(step), "state": dict(state)},
            background=background,
        )
        if _faults.active():  # a test's fault after the checkpoint: it is on disk first
            store.wait()
            _faults.fault_point(
                "after_checkpoint", self.trial_number, step or 0, study_dir=str(self.study_dir)
            )
        if self.world_size == 1 and yield_requested(self.study_dir, self.trial_number):
            # Asked to yield its devices (a shared pool): this checkpoint is the safe point,
            # and the trial resumes after this step, training nothing twice.
            store.wait()
            raise TrialStopped(None if step is None else int(step))

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The state this trial saved last (or, for a trial continuing another one's
        checkpoint, that trial's), or None on a first start. Every rank reads it."""
        if not self.resumed:
            return None
        saved = self._store().load()
        if saved is None:
            return None
        from hpsearch.trial._faults import fault_point

        step = saved.get("step")
        fault_point(
            "in_resume_load",
            self.trial_number,
            step if isinstance(step, int) else 0,
            study_dir=str(self.study_dir),
        )
        return dict(saved.get("state", saved))

    def _store(self) -> Any:
        from hpsearch.trial._checkpoint import CheckpointStore

        store = self.__dict__.get("_checkpoints")
        if store is None:
            store = self.__dict__["_checkpoints"] = CheckpointStore(
                self.checkpoint_dir, self.trial_number
            )
        return store
