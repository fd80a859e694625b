"""Every study in studies/ runs, with a tiny budget, so that none of them rots."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.spec import StudySpec

from .conftest import mlflow_runs

pytestmark = pytest.mark.slow

STUDIES = sorted((Path(__file__).resolve().parent.parent / "studies").glob("*.yaml"))


def test_there_is_a_study_per_family():
    models = {StudySpec.from_yaml(path).objective.model for path in STUDIES}
    assert models == {"cnn", "rnn", "lstm", "gan", "transformer"}
    names = {p.name for p in STUDIES}
    assert {
        "quickstart.yaml",
        "digits-cnn.yaml",
        "digits-rnn.yaml",
        "text-lstm.yaml",
        "digits-gan.yaml",
        "text-transformer.yaml",
        "digits-pareto.yaml",
    } <= names


def test_every_study_file_is_commented():
    for path in STUDIES:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        assert lines[0].startswith("#"), f"{path.name} starts by saying what it is"
        commented = [line for line in lines if "#" in line]
        assert len(commented) >= len(lines) // 2, f"{path.name}: comment the lines"


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_study_runs_with_a_tiny_budget(path, run_dir, dask_client):
    # A study of 2-device trials starts its own cluster (the shared one has 1-slot workers).
    spec = StudySpec.from_yaml(path)
    client = dask_client if spec.trial_size == 1 else None
    overrides: dict = {"n_trials": 2, "epochs": 2}
    if "max_chars" in spec.objective.dataset:  # a text study: a smaller slice of its corpus
        overrides["objective.dataset"] = {**spec.objective.dataset, "max_chars": 20000}
    if spec.search.scheduler == "pbt":  # a population of the 2 trials, exploiting after epoch 1
        overrides["search.pbt"] = {**spec.search.pbt.model_dump(), "population": 2}
        overrides["search.pbt"]["interval_epochs"] = 1
    study = Study.from_yaml(path, **overrides, run_dir=run_dir, client=client)
    result = study.run()
    trials = study.optuna_study().get_trials()
    assert len(trials) == 2
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), [
        (t.state, t.user_attrs.get("hpsearch.fail_reason")) for t in trials
    ]
    client, runs = mlflow_runs(result.mlflow_uri, study.spec.name)
    parent = next(r for r in runs if r.data.tags.get("hpsearch.role") == "study")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children)
    if study.spec.is_multi_objective:
        _check_multi_objective(study, result, trials, client, children)
        return
    if study.spec.search.scheduler == "asha" and result.best is None:
        # Two trials are too few for a rung's top 1/3: both end at their rung, saying so.
        for t in trials:
            assert t.state == TrialState.PRUNED
            assert "asha" in t.user_attrs.get("hpsearch.prune_reason", ""), t.user_attrs
        return
    assert result.best is not None and math.isfinite(result.best.value)
    metric = study.spec.metric
    by_number = {t.number: t for t in trials}
    for run in children:
        trial = by_number[int(run.data.tags["hpsearch.trial_number"])]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
        assert steps == sorted(trial.intermediate_values) and steps[0] == 1, "each epoch once"
        if trial.state == TrialState.COMPLETE:
            assert steps == [1, 2]
        assert (
            int(run.data.tags["hpsearch.n_train"]) > 0 and int(run.data.tags["hpsearch.n_val"]) > 0
        )
    if study.spec.objective.model == "gan":
        for run in children:
            assert "samples.png" in {a.path for a in client.list_artifacts(run.info.run_id)}
        best = {a.path for a in client.list_artifacts(parent.info.run_id, "best_trial")}
        assert "best_trial/samples.png" in best


def _check_multi_objective(study, result, trials, client, children):
    """Every objective and every cost per epoch in each trial's run; the front as Optuna's."""
    from hpsearch.search.pareto import step_values

    assert {t.number for t in result.front} == {t.number for t in study.optuna_study().best_trials}
    by_number = {t.number: t for t in trials}
    for run in children:
        trial = by_number[int(run.data.tags["hpsearch.trial_number"])]
        reported = sorted(step_values(trial))
        assert reported[0] == 1 and (trial.state != TrialState.COMPLETE or reported == [1, 2])
        for metric in {*study.spec.metrics, "params", "train_seconds", "latency_ms"}:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
            assert steps == reported, (metric, steps)
        assert run.data.metrics["params"] > 0 and run.data.metrics["latency_ms"] > 0
        assert (
            run.data.tags["hpsearch.pareto"]
            == str(trial.number in {t.number for t in result.front}).lower()
        )
        if trial.state == TrialState.COMPLETE:
            assert trial.values[1] == run.data.metrics["params"]
            assert set(trial.constraints) == {"params.max"}
