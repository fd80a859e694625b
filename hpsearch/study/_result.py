"""What a run of a study left behind (:class:`StudyResult`): a leaf module, so that every way
of running a study (on Dask, on the simulated cluster) returns the same record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from hpsearch.coordinator import Progress


@dataclass
class StudyResult:
    """What a run of a study left behind."""

    study_name: str
    progress: Progress
    best: optuna.trial.FrozenTrial | None
    storage_url: str
    mlflow_uri: str
    experiment: str
    parent_run_id: str
    #: Several objectives: the Pareto-front trials (Optuna's ``best_trials``); else empty.
    front: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    #: A simulated run's figures (virtual seconds, device-hours, ...; see hpsearch.simulation).
    simulation: dict[str, Any] | None = None
    #: Lines about the run worth reading at its end (how a warm start's configurations did).
    notes: list[str] = field(default_factory=list)
