"""The plain types of a trial: what a worker is handed, what it hands back, what an
objective knows of where it runs.

A leaf module: it imports nothing heavy and no other part of hpsearch at run time, so the
coordinator, the worker-side runner (:mod:`hpsearch.training._runner`) and user code can
all depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.spec import StudySpec
    from hpsearch.storage import ProxyAddress
    from hpsearch.tracking import TrackingTarget, TrialRun

#: The trial's user attribute that counts its starts (the coordinator reads it when a
#: worker is lost).
ATTEMPT_ATTR = "hpsearch.attempt"


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

    def save_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Keep this trial's state (anything ``torch.save`` takes: a step, model and
        optimizer ``state_dict()``s), so that a trial run again (its worker lost, the study
        interrupted and run again) goes on from here. Written atomically before it returns;
        rank 0 only (the other ranks do nothing)."""
        if self.rank == 0:
            self._checkpoints().save(dict(state), background=False)

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The state of the last :meth:`save_checkpoint` of this trial, or ``None`` (a first
        start, or no checkpoint that verifies). Every rank may read it."""
        return self._checkpoints().load() if self.resumed else None

    def _checkpoints(self) -> Any:
        from hpsearch.training._checkpoint import CheckpointStore

        return CheckpointStore(self.checkpoint_dir / "objective", self.trial_number)

    def log_image(self, image: Any, artifact_file: str) -> None:
        """Log an ``H x W x 3`` uint8 image as an artifact of the trial's run (rank 0 only)."""
        if self.run is not None:
            self.run.log_image(image, artifact_file)
