"""A short trial's run written in one transaction of MLflow's SQL store reads back through
MLflow's public API exactly as one written by the client's three calls."""

from __future__ import annotations

import math

import mlflow
import pytest

from hpsearch.tracking import StudyTracker, TrialRun, _client, _sql_store, flush, tag
from hpsearch.tracking import _trial_run as trial_run


def test_mlflow_is_a_checked_version() -> None:
    major_minor = ".".join(mlflow.__version__.split(".")[:2])
    assert major_minor in _sql_store.CHECKED_ON, (
        f"hpsearch.tracking._sql_store was checked on MLflow {', '.join(_sql_store.CHECKED_ON)}, "
        f"not {mlflow.__version__}: check write_ended_run against MLflow's create_run, "
        "log_batch and set_terminated, then add the version"
    )


def _target(uri, name, tmp_path):
    tracker = StudyTracker(uri, name, name, metric="loss", artifact_root=tmp_path / "artifacts")
    return tracker.open(storage_url="journal://x", tags={}, spec_yaml=f"name: {name}\n")


def _write(target, *, whole: bool, state: str, metrics: list[tuple[float, int]]) -> TrialRun:
    run = TrialRun(target, 7, tags={tag.WORKER: "w0", tag.ATTEMPT: 1}, resume=False)
    run._whole = whole
    run.log_params({"lr": 0.001, "layers": 3, "name": "a b/c"})
    for value, step in metrics:
        run.log_metrics({"loss": value, "accuracy": 1.0 - value}, step)
    run.set_tags({tag.PRUNE_REASON: "the reason"} if state == "PRUNED" else {})
    run.finish(state)
    assert flush(60) == 0
    assert run.run_id is not None
    return run


def _compare(uri, tmp_path, state, status, metrics):
    client = mlflow.MlflowClient(tracking_uri=uri)
    one_tx = _target(uri, "one-transaction", tmp_path)
    calls = _target(uri, "client-calls", tmp_path)
    writes = []
    original = _sql_store.write_ended_run

    def counted(*args, **kwargs):
        writes.append(1)
        return original(*args, **kwargs)

    trial_run.write_ended_run = counted
    try:
        a = _write(one_tx, whole=True, state=state, metrics=metrics)
        assert writes, "the one-transaction path wrote the run"
        b = _write(calls, whole=False, state=state, metrics=metrics)
    finally:
        trial_run.write_ended_run = original

    ra, rb = client.get_run(a.run_id), client.get_run(b.run_id)
    assert ra.info.status == rb.info.status == status
    assert ra.info.run_name == rb.info.run_name == tag.run_name(7, state)
    assert ra.info.lifecycle_stage == rb.info.lifecycle_stage == "active"
    assert ra.info.user_id == rb.info.user_id
    assert ra.info.experiment_id == one_tx.experiment_id
    assert ra.info.artifact_uri.endswith(f"/{a.run_id}/artifacts")
    assert (
        ra.info.artifact_uri.removesuffix(f"/{a.run_id}/artifacts").rsplit("/", 1)[0]
        == (rb.info.artifact_uri.removesuffix(f"/{b.run_id}/artifacts").rsplit("/", 1)[0])
    )
    assert ra.info.start_time <= ra.info.end_time
    differ = {tag.PARENT_RUN_ID, tag.STUDY}
    assert {k: v for k, v in ra.data.tags.items() if k not in differ} == {
        k: v for k, v in rb.data.tags.items() if k not in differ
    }
    assert ra.data.tags[tag.PARENT_RUN_ID] == one_tx.parent_run_id
    assert ra.data.params == rb.data.params == {"lr": "0.001", "layers": "3", "name": "a b/c"}
    assert _same(ra.data.metrics, rb.data.metrics)
    for key in ("loss", "accuracy"):
        ha = [(m.step, m.value) for m in client.get_metric_history(a.run_id, key)]
        hb = [(m.step, m.value) for m in client.get_metric_history(b.run_id, key)]
        assert _same(dict(sorted(ha)), dict(sorted(hb)))
        assert len(ha) == len(metrics)
    # What the views and the reconcile search by.
    for target, run in ((one_tx, a), (calls, b)):
        found = client.search_runs(
            [target.experiment_id],
            filter_string=f"tags.`{tag.TRIAL_NUMBER}` = '7' and attributes.status = '{status}'",
        )
        assert [r.info.run_id for r in found] == [run.run_id]
    frames = [mlflow.search_runs([t.experiment_id]) for t in (one_tx, calls)]
    trial_rows = [f[f[f"tags.{tag.TRIAL_NUMBER}"] == "7"] for f in frames]
    assert sorted(trial_rows[0].columns) == sorted(trial_rows[1].columns)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a
    )


@pytest.mark.parametrize(
    ("state", "status", "metrics"),
    [
        ("COMPLETE", "FINISHED", []),
        ("PRUNED", "FINISHED", [(0.5, 0), (0.25, 1), (0.125, 2)]),
        ("FAIL", "FAILED", [(0.5, 0), (float("nan"), 1), (float("inf"), 2)]),
        ("PAUSED", "SCHEDULED", [(0.75, 0), (0.5, 4)]),
    ],
)
def test_a_run_written_in_one_transaction_reads_back_as_the_clients(
    tmp_path, monkeypatch, state, status, metrics
):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    _compare(uri, tmp_path, state, status, metrics)


def test_a_run_written_in_one_transaction_on_postgresql(tmp_path, monkeypatch):
    import uuid

    from .test_scale_out import _admin

    name = f"hps_{uuid.uuid4().hex[:10]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    uri = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        _compare(uri, tmp_path, "PRUNED", "FINISHED", [(0.5, 0), (float("nan"), 1), (0.25, 2)])
    finally:
        _client._clients.pop(uri, None)  # its engine's connections go with the database
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_refused_name_writes_nothing(tmp_path):
    """MLflow's checks run before the transaction: a metric name MLflow refuses leaves no run."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    target = _target(uri, "refused", tmp_path)
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    from hpsearch.tracking import get_client

    client = get_client(uri)
    with pytest.raises(MlflowException):
        _sql_store.write_ended_run(
            client,
            target.experiment_id,
            name="trial-0",
            tags={tag.TRIAL_NUMBER: "0"},
            params={},
            metrics=[Metric("bad\x00name", 1.0, 0, 0)],
            status="FINISHED",
            start_time=0,
            end_time=1,
        )
    runs = client.search_runs([target.experiment_id])
    assert [r for r in runs if tag.TRIAL_NUMBER in r.data.tags] == []
