"""A study run by the release before the package moved into rooms is read and resumed.

``tests/data/legacy-run/legacy/`` is the run folder that release left (``hpsearch run
legacy.yaml --run-dir runs``, 3 trials of a CNN on digits): its Optuna journal, the spec it
kept, its checkpoints. Its MLflow store is not kept (its artifact paths name the folder it
was made in); the resumed run records in a store of its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpsearch import Study

LEGACY = Path(__file__).parent / "data" / "legacy-run"


@pytest.mark.slow
def test_a_study_of_the_previous_release_resumes(tmp_path):
    run_dir = tmp_path / "runs"
    shutil.copytree(LEGACY / "legacy", run_dir / "legacy")
    study = Study.from_yaml(LEGACY / "legacy.yaml", run_dir=run_dir, n_trials=5)
    before = {t.number: (t.state, t.value, t.params) for t in study.optuna_study().trials}
    assert len(before) == 3

    # The file is the one the study ran under, but for its budget: a free change.
    assert [c.field for c in study.changes()] == ["search.n_trials"]
    result = study.run(progress=False)

    after = study.optuna_study().trials
    assert len(after) == 5
    assert all(t.state.is_finished() for t in after)
    for t in after[:3]:  # what the earlier release recorded stays as it was
        assert (t.state, t.value, t.params) == before[t.number]
    assert result.progress.complete + result.progress.pruned + result.progress.failed == 5
    assert result.best is not None
