"""The one run path of a study, on every backend: check once (the stores, the changes since the
study last ran, the warm-start sources: :func:`check_run`), start the backend, write the run
folder, run, end, and the result (:func:`run_study`).

The Dask cluster (:mod:`hpsearch.study._dask`) and the simulated cluster
(:mod:`hpsearch.study._simulated`) are backends of this path (:class:`BackendRun`): they get
the same :class:`~hpsearch.search.StartPlan`, and their runs end in the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hpsearch.study._base import BackendRun, RunSetup
from hpsearch.study._result import StudyResult

if TYPE_CHECKING:
    from hpsearch.coordinator import Progress
    from hpsearch.search import StartPlan


def check_run(setup: RunSetup) -> StartPlan:
    """Everything a run checks before anything is started or written, once: the tracking
    server answers (not for a simulation), the changes since the study last ran are none
    breaking (none for a simulation: each run replaces its study), and each warm-start source
    can inform the study. What the run starts from; an
    :class:`~hpsearch.exceptions.HpsearchError` in one line per problem if it cannot run."""
    from hpsearch.search import existing, plan_start

    spec, layout = setup.spec, setup.layout
    found = None
    if not setup.simulated:
        from hpsearch.tracking import check_reachable

        check_reachable(setup.mlflow_uri)
        journal = None if spec.storage else layout.journal
        found = existing(setup.storage_url, spec.name, journal)
    return plan_start(spec, found, layout.run_dir)


def backend_of(setup: RunSetup) -> BackendRun:
    """The backend the spec names: the simulated cluster, or a Dask cluster."""
    if setup.simulated:
        from hpsearch.study._simulated import SimulatedRun

        return SimulatedRun(setup)
    from hpsearch.study._dask import DaskRun

    return DaskRun(setup)


def run_study(
    setup: RunSetup, plan: StartPlan, *, on_progress: Callable[[Progress], None] | None
) -> StudyResult:
    """Run the study (checked: ``plan``) on its backend until its budget is spent."""
    backend = backend_of(setup)
    backend.check()  # before anything is started or written
    try:
        with backend.started():
            write_run_folder(setup)
            backend.run(plan, on_progress)
    finally:
        backend.end()
    return result_of(setup, backend)


def write_run_folder(setup: RunSetup) -> None:
    """The study's run folder, with the spec it runs under (``study.yaml``)."""
    setup.layout.create()
    setup.layout.spec_file.write_text(setup.spec.to_yaml())


def result_of(setup: RunSetup, backend: BackendRun) -> StudyResult:
    """What the run left behind, read from the backend that ran it."""
    from hpsearch.search import end_notes
    from hpsearch.storage import redact

    study, spec = backend.study, setup.spec
    assert study is not None and backend.progress is not None  # the run went to its end
    return StudyResult(
        spec.name,
        backend.progress,
        backend.best,
        redact(setup.storage_url),
        backend.mlflow_uri,
        setup.experiment,
        backend.parent_run_id,
        list(study.best_trials) if spec.is_multi_objective else [],
        simulation=backend.figures,
        notes=end_notes(study),
    )
