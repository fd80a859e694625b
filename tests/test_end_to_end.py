"""A real study end to end: spec -> Optuna -> Dask worker processes -> PyTorch -> MLflow."""

from __future__ import annotations

import itertools
import os

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.testing import cnn_spec, user_spec

from .conftest import mlflow_runs

pytestmark = pytest.mark.slow


def _plain_study(run_dir, name):
    """Open the study with plain Optuna: no hpsearch needed to read it."""
    storage = JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def test_cnn_study_on_local_worker_processes(run_dir):
    spec = cnn_spec("e2e-cnn", n_trials=4, epochs=3, n_workers=2)
    result = Study(spec, run_dir=run_dir).run()

    study = _plain_study(run_dir, "e2e-cnn")
    trials = study.get_trials()
    assert len(trials) == 4
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) for t in trials)
    assert all(t.state != TrialState.FAIL for t in trials), [t.user_attrs for t in trials]
    for t in trials:
        assert set(t.params) == {"lr", "channels"}
        assert t.intermediate_values, "every trial reports per epoch"
        assert set(t.intermediate_values) <= {1, 2, 3}
        assert all(0.0 <= v <= 1.0 for v in t.intermediate_values.values())
        assert t.user_attrs["hpsearch.pid"] != os.getpid(), "trials run in worker processes"
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert complete and max(t.value for t in complete) > 0.5, "the CNN learns"
    assert len({t.user_attrs["hpsearch.pid"] for t in trials}) >= 1
    assert result.best is not None and result.best.number in {t.number for t in complete}

    uri = f"sqlite:///{run_dir / 'mlflow.db'}"
    assert result.mlflow_uri == uri
    client, runs = mlflow_runs(uri, "e2e-cnn")
    parents = [r for r in runs if r.data.tags.get("hpsearch.role") == "study"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["hpsearch.study"] == "e2e-cnn"
    assert "hpsearch.storage" in parent.data.tags
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4
    by_number = {int(r.data.tags["hpsearch.trial_number"]): r for r in children}
    for t in trials:
        run = by_number[t.number]
        assert run.data.tags["hpsearch.state"] == t.state.name
        assert run.info.status == "FINISHED"
        assert run.data.tags["hpsearch.pid"] == str(t.user_attrs["hpsearch.pid"])
        assert run.data.tags["hpsearch.worker"].startswith("tcp://127.0.0.1:")
        assert run.data.params["lr"] == str(t.params["lr"])
        assert run.data.params["batch_size"] == "64"
        history = client.get_metric_history(run.info.run_id, "val_accuracy")
        assert {m.step: m.value for m in history} == pytest.approx(t.intermediate_values)
        assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == sorted(
            t.intermediate_values
        )
        assert run.info.run_name == f"trial-{t.number} {t.state.name}"
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_pruned_trials_carry_the_decision(run_dir, dask_client):
    spec = user_spec(
        "prune", "hpsearch.testing.objectives:staircase", n_trials=10, max_concurrent=1
    )
    Study(spec, run_dir=run_dir, client=dask_client).run()
    study = _plain_study(run_dir, "prune")
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "the median pruner stops some staircase trials"
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "prune")
    by_number = {
        int(r.data.tags["hpsearch.trial_number"]): r
        for r in runs
        if "hpsearch.trial_number" in r.data.tags
    }
    for t in pruned:
        tags = by_number[t.number].data.tags
        assert tags["hpsearch.state"] == "PRUNED"
        assert int(tags["hpsearch.prune_step"]) == max(t.intermediate_values)
        assert float(tags["hpsearch.prune_value"]) == pytest.approx(
            t.intermediate_values[max(t.intermediate_values)]
        )
        assert "median" in tags["hpsearch.prune_reason"]
        assert t.user_attrs["hpsearch.prune_reason"] == tags["hpsearch.prune_reason"]
        history = client.get_metric_history(by_number[t.number].info.run_id, "value")
        assert sorted(m.step for m in history) == sorted(t.intermediate_values)


def test_user_objective_found_next_to_the_study_file(tmp_path, run_dir, dask_client, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_objectives.py").write_text(
        "import os\n"
        "def objective(trial):\n"
        "    x = trial.suggest_float('x', -1.0, 1.0)\n"
        "    trial.report(x * x, 0)\n"
        "    trial.set_user_attr('ran_in', os.getpid())\n"
        "    return x * x\n"
    )
    study_file = folder / "mine.yaml"
    study_file.write_text(
        "name: mine\n"
        "objective: {model: 'my_objectives:objective', direction: minimize}\n"
        "search: {n_trials: 4, sampler: random, pruner: none}\n"
    )
    monkeypatch.delenv("PYTHONPATH", raising=False)
    result = Study.from_yaml(study_file, run_dir=run_dir, client=dask_client).run()
    assert result.progress.complete == 4
    study = _plain_study(run_dir, "mine")
    assert all(t.user_attrs["ran_in"] != os.getpid() for t in study.trials)
    assert all(set(t.params) == {"x"} for t in study.trials)
    assert all(t.value == pytest.approx(t.params["x"] ** 2) for t in study.trials)


def test_objective_defining_its_own_space(run_dir, dask_client):
    spec = user_spec("dynamic", "hpsearch.testing.objectives:dynamic", n_trials=6, space={})
    Study(spec, run_dir=run_dir, client=dask_client).run()
    study = _plain_study(run_dir, "dynamic")
    assert len(study.trials) == 6
    for t in study.trials:
        assert t.state == TrialState.COMPLETE
        assert set(t.params) in ({"kind", "x_a"}, {"kind", "x_b"})
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "dynamic")
    trial_runs = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert all("kind" in r.data.params for r in trial_runs)


def test_a_workers_later_trials_sample_from_the_whole_history(run_dir, dask_client):
    """Trials that sample on their worker (an objective suggesting its own parameters) see
    every trial asked before them, not the history of their worker's first trial."""
    spec = user_spec("history", "hpsearch.testing.objectives:sampler_history", n_trials=8)
    Study(spec, run_dir=run_dir, client=dask_client).run()
    trials = _plain_study(run_dir, "history").trials
    assert len(trials) == 8
    for t in trials:
        # Trials 0..number were asked (the trial itself is RUNNING) before it sampled.
        assert t.user_attrs["sampler_saw"] >= t.number + 1, (t.number, t.user_attrs)


def test_short_trials_wait_on_their_workers_and_no_set_runs_two(run_dir, dask_client):
    """Trials of milliseconds are queued on the workers (one running and one waiting on each
    set), the budget stays exact, and each worker still runs one trial at a time."""
    spec = user_spec("queued", "hpsearch.testing.objectives:trivial", n_trials=40)
    Study(spec, run_dir=run_dir, client=dask_client).run()
    trials = _plain_study(run_dir, "queued").trials
    assert len(trials) == 40 and all(t.state == TrialState.COMPLETE for t in trials)
    # In flight in the study (asked, not yet told): more than the 2 sets once trials are
    # known to be short (2 running + 2 waiting + 1 asked ahead).
    events = sorted(
        [(t.datetime_start, 1) for t in trials] + [(t.datetime_complete, -1) for t in trials]
    )
    in_flight = most = 0
    for _, change in events:
        in_flight += change
        most = max(most, in_flight)
    assert most >= 4, most
    # Where they ran: each trial's run spans its time on the worker; none overlap on a worker.
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "queued")
    by_worker: dict[str, list[tuple[int, int]]] = {}
    for r in runs:
        if "hpsearch.trial_number" in r.data.tags:
            assert r.info.status == "FINISHED"
            by_worker.setdefault(r.data.tags["hpsearch.worker"], []).append(
                (r.info.start_time, r.info.end_time)
            )
    assert sum(len(v) for v in by_worker.values()) == 40 and len(by_worker) == 2
    for spans in by_worker.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_resume_continues_to_the_budget_without_duplicates(run_dir, dask_client):
    spec = user_spec("resume", "hpsearch.testing.objectives:staircase", n_trials=3)
    Study(spec, run_dir=run_dir, client=dask_client).run()
    Study(spec, run_dir=run_dir, client=dask_client).run()  # already at budget: nothing to do
    assert len(_plain_study(run_dir, "resume").trials) == 3
    spec["search"]["n_trials"] = 5
    Study(spec, run_dir=run_dir, client=dask_client).run()
    study = _plain_study(run_dir, "resume")
    assert sorted(t.number for t in study.trials) == [0, 1, 2, 3, 4]
    assert all(t.state.is_finished() for t in study.trials)
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "resume")
    assert len([r for r in runs if r.data.tags.get("hpsearch.role") == "study"]) == 1
    numbers = [
        int(r.data.tags["hpsearch.trial_number"])
        for r in runs
        if "hpsearch.trial_number" in r.data.tags
    ]
    assert sorted(numbers) == [0, 1, 2, 3, 4]
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_failing_and_diverging_trials_end_fail_and_the_study_goes_on(run_dir, dask_client):
    for name, objective in [
        ("raises", "raises"),
        ("nan", "returns_nan"),
        ("nanreport", "reports_nan"),
    ]:
        spec = user_spec(name, f"hpsearch.testing.objectives:{objective}", n_trials=4)
        result = Study(spec, run_dir=run_dir, client=dask_client).run()
        assert result.progress.ended == 4
    raised = _plain_study(run_dir, "raises").trials
    assert {t.number for t in raised if t.state == TrialState.FAIL} == {1, 3}
    assert "ValueError: odd trial 1" in raised[1].user_attrs["hpsearch.fail_reason"]
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "raises")
    failed = [r for r in runs if r.data.tags.get("hpsearch.state") == "FAIL"]
    assert len(failed) == 2 and all(r.info.status == "FAILED" for r in failed)
    assert all(r.data.tags["hpsearch.error_type"] == "ValueError" for r in failed)
    artifacts = [a.path for a in client.list_artifacts(failed[0].info.run_id)]
    assert "traceback.txt" in artifacts
    nan = _plain_study(run_dir, "nan").trials
    assert all(
        t.state == TrialState.FAIL and "nan" in t.user_attrs["hpsearch.fail_reason"] for t in nan
    )
    nanreport = _plain_study(run_dir, "nanreport").trials
    for t in nanreport:
        assert t.state == TrialState.FAIL
        assert list(t.intermediate_values) == [0], "the NaN never reached the pruner"
        assert "diverged" in t.user_attrs["hpsearch.fail_reason"]


def test_a_finished_grid_ends_the_study(run_dir, dask_client):
    """The grid sampler stops the study once every point is tried (from its after_trial
    hook): the coordinator asks no more and ends with the grid, every trial told."""
    space = {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25}}
    spec = user_spec("grid-done", "hpsearch.testing.objectives:staircase", n_trials=8, space=space)
    spec["search"].update(sampler="grid", pruner="none")
    Study(spec, run_dir=run_dir, client=dask_client).run()
    study = optuna.load_study(
        study_name="grid-done",
        storage=JournalStorage(JournalFileBackend(str(run_dir / "grid-done" / "optuna.journal"))),
    )
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    # Trials asked while the last points were still running may repeat a point (Optuna's
    # grid sampler does the same in study.optimize with n_jobs > 1).
    assert {t.params["x"] for t in study.trials} == {0.0, 0.25, 0.5, 0.75, 1.0}
    # The grid is done once every point has a finished trial; no trial is asked after that
    # (trials asked ahead before it, while the last points ran, are told as usual).
    done_at = max(
        min(t.datetime_complete for t in study.trials if t.params["x"] == x)
        for x in {t.params["x"] for t in study.trials}
    )
    assert all(t.datetime_start <= done_at for t in study.trials), [
        (t.number, t.datetime_start, done_at) for t in study.trials
    ]
