"""A study on the simulated cluster (``cluster.backend: simulated``): the same start as on
Dask (the spec kept, carried edits, a warm start: :func:`hpsearch.search.prepare`), the
simulated cluster in place of Dask, and the same result."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hpsearch.study._result import StudyResult

if TYPE_CHECKING:
    from hpsearch.coordinator import Progress
    from hpsearch.spec import StudySpec
    from hpsearch.trial import RunLayout


def run_simulated(
    spec: StudySpec,
    layout: RunLayout,
    *,
    storage_url: str,
    mlflow_uri: str,
    experiment: str,
    on_progress: Callable[[Progress], None] | None,
) -> StudyResult:
    """Run a study of ``cluster.backend: simulated`` (what :meth:`Study.run` does for one):
    its Optuna study is written to the study's storage (replacing an earlier simulation of
    it), its timeline and figures to its run folder."""
    from hpsearch.search import best_complete_trial, end_notes
    from hpsearch.simulation import record, save, simulate
    from hpsearch.storage import redact

    layout.create()
    layout.spec_file.write_text(spec.to_yaml())
    simulation = simulate(spec, study_dir=layout.study_dir, on_progress=on_progress)
    save(simulation, layout.study_dir, storage_url)
    figures = simulation.summary()
    figures["wall_s"] = round(simulation.wall_s, 3)
    sim = spec.cluster.simulated
    parent = ""
    if sim is not None and sim.tracking:  # MLflow as a real study leaves it
        parent = record(simulation, spec, mlflow_uri, experiment)
    return StudyResult(
        spec.name,
        simulation.progress,
        best_complete_trial(simulation.study),
        redact(storage_url),
        mlflow_uri if parent else "",
        experiment,
        parent,
        list(simulation.study.best_trials) if spec.is_multi_objective else [],
        simulation=figures,
        notes=end_notes(simulation.study),
    )
