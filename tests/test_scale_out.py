"""Shared storages for real: PostgreSQL for the Optuna study, an MLflow server backed by it."""

from __future__ import annotations

import uuid

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.exceptions import SpecError
from hpsearch.testing import user_spec

from .conftest import free_port
from .test_tracking_outage import Server

pytestmark = pytest.mark.slow

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _admin():
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        # The machines this project runs CI on have PostgreSQL; a laptop may not.
        pytest.skip(f"no PostgreSQL on 127.0.0.1:5432 ({exc})")


@pytest.fixture
def database():
    """A fresh database on the local PostgreSQL (dropped afterwards); yields its name."""
    name = f"hps_{uuid.uuid4().hex[:10]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Workers through the proxy; straight to PostgreSQL ("direct"): benchmarks/scenarios.
@pytest.mark.parametrize("access", ["proxy"])
def test_postgres_study_across_cli_started_workers_and_an_mlflow_server_on_postgres(
    access, database, tmp_path, run_dir, monkeypatch
):
    """A `dask scheduler`, two `hpsearch worker` processes, the study in PostgreSQL (reached
    through the coordinator's gRPC proxy, or by the workers directly) and a real MLflow
    server on PostgreSQL; checked afterwards with stock clients."""
    import os

    from .test_multinode import _wait_workers, start_scheduler, start_worker, stop_processes

    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{database}_mlflow"')
    server = Server(tmp_path, free_port())
    server.backend = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}_mlflow"
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [start_scheduler(port, env)]
    try:
        for name in ("node-a", "node-b"):
            procs.append(start_worker(address, env, name))
        server.start()
        _wait_workers(address, 2)
        monkeypatch.setenv("HPS_DB_USER", "postgres")
        spec = user_spec("pg", "hpsearch.testing.objectives:staircase", n_trials=6)
        spec["storage"] = f"postgresql+psycopg://${{HPS_DB_USER}}@127.0.0.1:5432/{database}"
        spec["tracking"] = {"mlflow_uri": server.uri}
        spec["cluster"] = {"address": address, "storage_access": access}
        result = Study(spec, run_dir=run_dir).run(progress=False)
        assert result.progress.ended == 6
        assert not (run_dir / "pg" / "optuna.journal").exists(), "the study lives in PostgreSQL"
        # Stock clients read both back.
        study = optuna.load_study(
            study_name="pg", storage=f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
        )
        assert len(study.trials) == 6 and all(
            t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials
        )
        workers = {t.user_attrs["hpsearch.worker"] for t in study.trials}
        assert len(workers) == 2, "both workers ran trials"
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=server.uri)
        exp = client.get_experiment_by_name("pg")
        runs = client.search_runs([exp.experiment_id])
        trials = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
        assert sorted(int(r.data.tags["hpsearch.trial_number"]) for r in trials) == list(range(6))
        assert all(r.info.status == "FINISHED" for r in runs)
        parent = next(r for r in runs if r.data.tags.get("hpsearch.role") == "study")
        assert "${HPS_DB_USER}" not in parent.data.tags["hpsearch.storage"]
    finally:
        server.stop()
        stop_processes(procs)
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}_mlflow" WITH (FORCE)')


def test_a_missing_credential_variable_is_one_line(run_dir, monkeypatch):
    monkeypatch.delenv("HPS_NOT_SET", raising=False)
    spec = user_spec("pg-missing", "hpsearch.testing.objectives:staircase")
    spec["storage"] = "postgresql+psycopg://hps:${HPS_NOT_SET}@127.0.0.1:5432/x"
    with pytest.raises(
        SpecError, match=r"^storage: the environment variable HPS_NOT_SET is not set"
    ):
        _ = Study(spec, run_dir=run_dir).storage_url
