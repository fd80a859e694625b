"""Where a study's files land: fixed, so that other tools can find them.

``RUN_DIR/NAME/optuna.journal``   the Optuna study (default storage)
``RUN_DIR/NAME/checkpoints/``      one checkpoint per trial, written atomically each epoch
``RUN_DIR/NAME/checkpoints/pbt/``  population-based training: each member's checkpoint at
                                   each interval, which continuations copy
``RUN_DIR/NAME/tracking-backlog/`` MLflow writes kept while the tracking store was unreachable
``RUN_DIR/NAME/study.yaml``        the spec as it was run
``RUN_DIR/NAME/stop-requested``    while an interrupted run stops its trials in flight
``RUN_DIR/mlflow.db``              one MLflow store for all studies of the run folder
``RUN_DIR/mlartifacts/``           MLflow artifacts of that store
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RUN_DIR = "runs"


@dataclass(frozen=True)
class RunLayout:
    """Paths of one study inside a run folder (pure: nothing is created)."""

    run_dir: Path
    study_name: str

    @classmethod
    def of(cls, run_dir: str | os.PathLike[str] | None, study_name: str) -> RunLayout:
        return cls(Path(run_dir or DEFAULT_RUN_DIR).absolute(), study_name)

    @classmethod
    def of_study_dir(cls, study_dir: str | os.PathLike[str]) -> RunLayout:
        """The layout of the study whose folder is ``study_dir`` (``RUN_DIR/NAME``)."""
        path = Path(study_dir).absolute()
        return cls(path.parent, path.name)

    @property
    def study_dir(self) -> Path:
        return self.run_dir / self.study_name

    @property
    def journal(self) -> Path:
        return self.study_dir / "optuna.journal"

    @property
    def checkpoints(self) -> Path:
        return self.study_dir / "checkpoints"

    @property
    def tracking_backlog(self) -> Path:
        """MLflow writes that could not be made (the store was unreachable), kept for later."""
        return self.study_dir / "tracking-backlog"

    @property
    def spec_file(self) -> Path:
        return self.study_dir / "study.yaml"

    @property
    def mlflow_db(self) -> Path:
        return self.run_dir / "mlflow.db"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.run_dir / "mlartifacts"

    @property
    def default_storage_url(self) -> str:
        return f"journal://{self.journal}"

    @property
    def default_mlflow_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    def create(self) -> None:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
