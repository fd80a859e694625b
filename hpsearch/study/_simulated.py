"""A study on the simulated cluster (``cluster.backend: simulated``): a backend of the run
path like the Dask cluster, with the same start (the plan the run checked once: the spec kept,
a warm start) and the same result; its study is run in memory and written to the study's
storage at the end (replacing an earlier simulation of it), its timeline and figures to its
run folder, and its MLflow records where ``cluster.simulated.tracking`` asks for them."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from hpsearch.study._base import BackendRun, RunSetup

if TYPE_CHECKING:
    from hpsearch.coordinator import Progress
    from hpsearch.search import StartPlan


class SimulatedRun(BackendRun):
    """One run of a study on the simulated cluster (nothing to start or stop)."""

    def __init__(self, setup: RunSetup) -> None:
        super().__init__(setup)
        self.mlflow_uri = ""  # until the run is recorded in MLflow

    def check(self) -> None:
        """Nothing more than the run path checks: no cluster, no tracking server."""

    def started(self) -> AbstractContextManager[None]:
        return nullcontext()

    def run(self, plan: StartPlan, on_progress: Callable[[Progress], None] | None) -> None:
        from hpsearch.search import best_complete_trial
        from hpsearch.simulation import record, save, simulate

        setup = self.setup
        spec, layout = setup.spec, setup.layout
        simulation = simulate(spec, study_dir=layout.study_dir, on_progress=on_progress, plan=plan)
        save(simulation, layout.study_dir, setup.storage_url)
        self.study, self.progress = simulation.study, simulation.progress
        self.best = best_complete_trial(simulation.study)
        self.figures = {**simulation.summary(), "wall_s": round(simulation.wall_s, 3)}
        sim = spec.cluster.simulated
        if sim is not None and sim.tracking:  # MLflow as a real study leaves it
            self.parent_run_id = record(simulation, spec, setup.mlflow_uri, setup.experiment)
            self.mlflow_uri = setup.mlflow_uri if self.parent_run_id else ""

    def end(self) -> None:
        """Nothing stays open: the simulated study is saved, and recorded, by :meth:`run`."""
