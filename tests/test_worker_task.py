"""The worker acts on what the coordinator decided, handed over in the task as plain values,
and maps every way a trial's attempt ends to one of the outcome states."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.spec import StudySpec
from hpsearch.testing import user_spec
from hpsearch.trial import OutcomeState, RunLayout, TrialOutcome


def test_outcome_states_say_what_the_study_is_told() -> None:
    assert [s for s in OutcomeState if s.ends_trial] == [
        OutcomeState.COMPLETE,
        OutcomeState.PRUNED,
        OutcomeState.FAIL,
    ]
    assert {s.told for s in OutcomeState if s.ends_trial} == {
        TrialState.COMPLETE,
        TrialState.PRUNED,
        TrialState.FAIL,
    }
    assert all(OutcomeState.of(s.told) is s for s in OutcomeState if s.ends_trial)
    for going_on in (OutcomeState.PAUSED, OutcomeState.INTERRUPTED, OutcomeState.PREEMPTED):
        assert going_on.goes_on
        with pytest.raises(ValueError, match="goes on"):
            _ = going_on.told
    # Its name from a caller that wrote it is the member; the MLflow tag holds the name.
    assert TrialOutcome(0, "PAUSED").state is OutcomeState.PAUSED  # type: ignore[arg-type]
    assert f"{OutcomeState.PRUNED}" == "PRUNED"


def test_a_continuation_copies_the_checkpoint_the_task_names(tmp_path: Path) -> None:
    """The lineage and the checkpoint folder come from the task, not from the study: a
    trial with no user attributes at all copies the checkpoint its task names, and fails
    with the coordinator's reason where that parent left none."""
    from tests.conftest import local_trials

    raw = user_spec("lineage", "hpsearch.testing.objectives:trivial", n_trials=2)
    study, send = local_trials(tmp_path, StudySpec.from_dict(raw))
    folder = tmp_path / "elsewhere"
    orphan = study.ask()
    outcome = send(orphan, lineage=(7, 3), checkpoint_dir=str(folder))
    assert outcome.state is OutcomeState.FAIL
    assert outcome.error_type == "MissingCheckpoint"
    assert "trial 7 left no checkpoint at epoch 3" in (outcome.reason or "")

    # The parent's snapshot at epoch 3 where the task says checkpoints are.
    from hpsearch.trial import snapshot
    from hpsearch.trial._checkpoint import CheckpointStore

    CheckpointStore(folder, 7).save({"step": 3, "weights": [1, 2, 3]}, background=False)
    assert snapshot(folder, 7, 3)
    child = study.ask()
    assert child.user_attrs == {}
    outcome = send(child, lineage=(7, 3), checkpoint_dir=str(folder))
    assert outcome.state is OutcomeState.COMPLETE
    assert CheckpointStore(folder, child.number).load()["weights"] == [1, 2, 3]
    assert not RunLayout.of_study_dir(tmp_path / "lineage").checkpoints.exists()
    assert study.trials[child.number].state == TrialState.RUNNING  # the coordinator tells


def test_a_task_without_a_checkpoint_folder_takes_its_study_folders(tmp_path: Path) -> None:
    from hpsearch.storage import ProxyAddress
    from hpsearch.trial import TrialTask

    spec = StudySpec.from_dict(user_spec("x", "hpsearch.testing.objectives:trivial"))
    task = TrialTask("x", 0, 0, spec, ProxyAddress("127.0.0.1", 1), None, str(tmp_path), [])  # type: ignore[arg-type]
    assert task.checkpoint_dir == str(RunLayout.of_study_dir(tmp_path).checkpoints)
    assert task.devices_wanted == 1 and not task.snapshot_pauses and task.lineage is None
    assert optuna.trial.TrialState.COMPLETE is OutcomeState.COMPLETE.told
