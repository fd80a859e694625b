"""A new SQLite tracking store is a copy of an empty, migrated one, and MLflow sees no
difference from a store it created itself."""

from __future__ import annotations

import mlflow
import pytest

from hpsearch.tracking import _client


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HPSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_seeded_store_is_a_working_mlflow_store(tmp_path, cache):
    uri = f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"
    _client.seed_sqlite_store(uri)
    assert (cache / f"mlflow-{mlflow.__version__}-empty.db").exists()
    client = mlflow.MlflowClient(tracking_uri=uri)
    default = client.get_experiment("0")
    assert default.name == "Default"
    # The one value the copy changes: the Default experiment's artifacts live beside it.
    assert default.artifact_location == str((tmp_path / "a" / "mlruns" / "0").resolve())
    exp = client.create_experiment("e")
    run = client.create_run(exp, tags={"k": "v"})
    client.log_metric(run.info.run_id, "m", 1.5, step=0)
    client.set_terminated(run.info.run_id)
    (found,) = client.search_runs([exp], filter_string="tags.k = 'v'")
    assert found.data.metrics == {"m": 1.5}


def test_two_stores_from_one_template_are_independent(tmp_path, cache):
    uris = [f"sqlite:///{tmp_path / name / 'mlflow.db'}" for name in ("a", "b")]
    for uri in uris:
        _client.seed_sqlite_store(uri)
    mlflow.MlflowClient(tracking_uri=uris[0]).create_experiment("only-in-a")
    names = {e.name for e in mlflow.MlflowClient(tracking_uri=uris[1]).search_experiments()}
    assert names == {"Default"}


def test_an_existing_store_is_left_alone(tmp_path, cache):
    path = tmp_path / "mlflow.db"
    uri = f"sqlite:///{path}"
    mlflow.MlflowClient(tracking_uri=uri).create_experiment("kept")
    _client.seed_sqlite_store(uri)
    names = {e.name for e in mlflow.MlflowClient(tracking_uri=uri).search_experiments()}
    assert "kept" in names


def test_without_a_writable_cache_mlflow_creates_the_store(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("HPSEARCH_CACHE_DIR", str(blocker / "cache"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _client.seed_sqlite_store(uri)
    assert not (tmp_path / "mlflow.db").exists()
    assert mlflow.MlflowClient(tracking_uri=uri).get_experiment("0").name == "Default"


def test_a_wal_store_commits_without_an_fsync_each_and_nothing_else_changes(tmp_path):
    """synchronous=NORMAL on connections to a tracking store in WAL mode (the study's store),
    and only there: another SQLite file, or the same store in rollback mode, keeps FULL."""
    import sqlalchemy

    from hpsearch.tracking._study_run import _sqlite_wal

    def synchronous(path) -> int:
        engine = sqlalchemy.create_engine(f"sqlite:///{path}")
        try:
            with engine.connect() as con:
                return int(con.execute(sqlalchemy.text("PRAGMA synchronous")).scalar_one())
        finally:
            engine.dispose()

    wal, rollback, other = (tmp_path / n / "mlflow.db" for n in ("wal", "rollback", "other"))
    for path in (wal, rollback, other):
        _client.seed_sqlite_store(f"sqlite:///{path}")
    _sqlite_wal(f"sqlite:///{wal}")
    for path in (wal, rollback):
        client = _client.get_client(f"sqlite:///{path}")
        client.create_experiment(path.parent.name)
    assert synchronous(wal) == 1  # NORMAL
    assert synchronous(rollback) == 2  # FULL, SQLite's default
    assert synchronous(other) == 2
    # The writes are all there for a new reader.
    names = {
        e.name for e in mlflow.MlflowClient(tracking_uri=f"sqlite:///{wal}").search_experiments()
    }
    assert names == {"Default", "wal"}
