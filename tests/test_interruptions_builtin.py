"""The interruption-point matrix for the built-in trials: the cases that reach their own
code paths (the epoch loop's stop, its checkpoint and resume); see ``test_interruptions``."""

from __future__ import annotations

import pytest

from .test_interruptions import CNN_CASES, _id, interrupt_and_check


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory):
    """One MLflow store for the module, an experiment per case."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.mark.parametrize("case", CNN_CASES, ids=[_id(c) for c in CNN_CASES])
def test_a_builtin_trial_interrupted_anywhere_resumes_as_if_it_never_was(
    tmp_path, tmp_path_factory, tracking_uri, case
):
    interrupt_and_check(tmp_path, tmp_path_factory, tracking_uri, "cnn", case)
