"""A trial's MLflow run as the worker writes it: short trials and long ones end the same way."""

from __future__ import annotations

import time

import pytest

from hpsearch.tracking import BATCH_INTERVAL, StudyTracker, TrialRun, flush, tag


def _target(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(
        uri, "writes", "writes", metric="loss", artifact_root=tmp_path / "artifacts"
    )
    return tracker.open(storage_url="journal://x", tags={}, spec_yaml="name: writes\n")


def _trial_runs(target):
    from mlflow import MlflowClient

    client = MlflowClient(target.uri)
    runs = client.search_runs([target.experiment_id])
    return {int(r.data.tags[tag.TRIAL_NUMBER]): r for r in runs if tag.TRIAL_NUMBER in r.data.tags}


def _check_ended(run, number, state, status, params):
    assert run.info.status == status
    assert run.info.end_time is not None
    assert run.info.run_name == tag.run_name(number, state)
    assert run.data.tags[tag.STATE] == state
    assert run.data.tags[tag.WORKER] == "w0"
    assert dict(run.data.params) == params


def test_a_short_trial_and_a_long_one_end_with_the_same_record(tmp_path):
    target = _target(tmp_path)
    # Short: it ends before its run is written; the run is created once, already ended.
    short = TrialRun(target, 0, tags={tag.WORKER: "w0"}, resume=False)
    short.log_params({"x": 1.5})
    short.log_metrics({"loss": 0.25}, 0)
    short.finish("COMPLETE")
    short_ended = int(time.time() * 1000)
    # Long: its run is RUNNING while it trains, and ends like the short one.
    long = TrialRun(target, 1, tags={tag.WORKER: "w0"}, resume=False)
    long.log_params({"x": 2.5})
    deadline = time.monotonic() + 60
    while 1 not in _trial_runs(target) and time.monotonic() < deadline:
        time.sleep(BATCH_INTERVAL / 4)
    running = _trial_runs(target)[1]
    assert running.info.status == "RUNNING"
    assert running.info.run_name == tag.run_name(1)
    long.log_metrics({"loss": 0.5}, 0)
    long.finish("PRUNED")
    long_ended = int(time.time() * 1000)
    assert flush(60) == 0

    runs = _trial_runs(target)
    assert set(runs) == {0, 1}  # one run per trial
    _check_ended(runs[0], 0, "COMPLETE", "FINISHED", {"x": "1.5"})
    _check_ended(runs[1], 1, "PRUNED", "FINISHED", {"x": "2.5"})
    assert runs[0].data.metrics == {"loss": 0.25}
    assert runs[1].data.metrics == {"loss": 0.5}
    # Each run ends when its trial did, not when the writer got to it (later, under load).
    assert runs[0].info.start_time <= runs[0].info.end_time <= short_ended
    assert runs[1].info.start_time <= runs[1].info.end_time <= long_ended


def test_a_trial_run_again_continues_its_run(tmp_path):
    target = _target(tmp_path)
    first = TrialRun(target, 3, tags={tag.WORKER: "w0"}, resume=False)
    first.log_params({"x": 0.5})
    first.finish("FAIL")
    assert flush(60) == 0
    again = TrialRun(target, 3, tags={tag.WORKER: "w0"}, resume=True)
    again.finish("COMPLETE")
    assert flush(60) == 0
    runs = _trial_runs(target)
    assert set(runs) == {3}
    _check_ended(runs[3], 3, "COMPLETE", "FINISHED", {"x": "0.5"})


@pytest.mark.parametrize("path", ["client calls", "one transaction"])
def test_a_create_whose_answer_is_lost_makes_no_second_run(tmp_path, monkeypatch, path):
    """The store commits the run and the answer never arrives (the server killed mid-reply):
    the retried write finds that run instead of creating another one. A short trial's run
    is written by the client's calls, or in one transaction of MLflow's SQL store."""
    from mlflow import MlflowClient

    from hpsearch.tracking import _trial_run

    target = _target(tmp_path)
    lost: list[str] = []
    if path == "client calls":
        monkeypatch.setattr(_trial_run, "write_ended_run", lambda *a, **k: None)
        create = MlflowClient.create_run

        def create_then_lose_the_answer(self, *args, **kwargs):
            run = create(self, *args, **kwargs)
            if not lost:
                lost.append(run.info.run_id)
                raise ConnectionError("Connection broken: IncompleteRead(0 bytes read)")
            return run

        monkeypatch.setattr(MlflowClient, "create_run", create_then_lose_the_answer)
    else:
        write = _trial_run.write_ended_run

        def write_then_lose_the_answer(*args, **kwargs):
            run_id = write(*args, **kwargs)
            if not lost:
                lost.append(run_id)
                raise ConnectionError("the answer was lost")
            return run_id

        monkeypatch.setattr(_trial_run, "write_ended_run", write_then_lose_the_answer)
    trial = TrialRun(target, 5, tags={tag.WORKER: "w0"}, resume=False)
    trial.log_params({"x": 0.5})
    trial.log_metrics({"loss": 0.1}, 0)
    trial.finish("COMPLETE")
    assert flush(60) == 0
    from mlflow import MlflowClient as Client

    runs = [
        r
        for r in Client(target.uri).search_runs([target.experiment_id])
        if tag.TRIAL_NUMBER in r.data.tags
    ]
    assert [r.info.run_id for r in runs] == lost, "one run: the one the store committed"
    _check_ended(runs[0], 5, "COMPLETE", "FINISHED", {"x": "0.5"})
    assert runs[0].data.metrics == {"loss": 0.1}
