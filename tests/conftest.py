from __future__ import annotations

import os
import socket
import warnings

import pytest


@pytest.fixture(autouse=True)
def _quiet():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    yield


@pytest.fixture(scope="session")
def dask_client():
    """One local cluster of 2 worker processes, shared by the tests that only need one."""
    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    cluster = start_local_cluster(n_workers=2, gpus_per_trial=1)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close(timeout=20)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A fresh run folder, and a working directory that is not the repository."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "runs"


def mlflow_runs(uri: str, experiment: str):
    """All runs of an experiment as MLflow ``Run`` objects (stock client)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment}"
    return client, list(client.search_runs([exp.experiment_id], max_results=1000))


os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def two_slot_client():
    """A local cluster with one worker owning 2 CPU slots: trials of 2 ranks run there (one
    cluster per test module, so that a module's trials reuse its warm rank processes)."""
    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    cluster = start_local_cluster(gpus=None, gpus_per_trial=2, n_slots=2)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close(timeout=20)
