from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
import warnings
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _quiet():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    yield


class SharedCluster:
    """A local cluster that several tests use, checked before each of them and started anew
    when an earlier test left it unusable (a killed worker that did not come back, work still
    running after a failed study): one test's failure does not become the next one's."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.cluster: Any = None
        self.client: Any = None

    def get(self) -> Any:
        if self.client is not None and not self._ready():
            self.close()
        if self.client is None:
            from distributed import Client

            from hpsearch.cluster import start_local_cluster

            self.cluster = start_local_cluster(**self.options)
            self.client = Client(self.cluster)
        return self.client

    def _ready(self) -> bool:
        try:
            self.client.wait_for_workers(len(self.cluster.worker_spec), timeout=60)
            deadline = time.monotonic() + 60
            while any(self.client.processing().values()):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)
        except Exception:  # a closed client or scheduler: start anew
            return False
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        with contextlib.suppress(Exception):
            self.cluster.close(timeout=20)
        self.client = self.cluster = None


@pytest.fixture(scope="session")
def one_slot_cluster():
    """One local cluster of 2 worker processes of one slot each, for the tests that only need
    one (see :class:`SharedCluster`)."""
    shared = SharedCluster(n_workers=2, gpus_per_trial=1)
    yield shared
    shared.close()


@pytest.fixture
def dask_client(one_slot_cluster):
    """A client of the shared 2-worker cluster, ready: both workers up, nothing running."""
    return one_slot_cluster.get()


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
# The MLflow servers the tests start need no job runner (MLflow's GenAI evaluation jobs):
# two processes less for each server.
os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")


def spawn_ranks(fn: Any, *args: Any, world_size: int = 2) -> None:
    """Run ``fn(rank, world_size, port, *args)`` in ``world_size`` processes that form a gloo
    group through a store bound here first (no race for a free port with other tests); each
    process ends as soon as ``fn`` returns (see ``hpsearch.testing.families.exit_when_done``)."""
    import torch.multiprocessing as mp

    from hpsearch.testing.families import exit_when_done, rendezvous

    with rendezvous() as port:
        mp.spawn(exit_when_done, args=(fn, world_size, port, *args), nprocs=world_size, join=True)


_PORTS = itertools.count()


def local_trials(tmp_path, spec, *, sampler=None):
    """A study on a journal file under ``tmp_path`` and a way to run its trials in this
    process as a worker would (``run_trial``, the study opened directly, MLflow in SQLite):
    returns the study and ``send(trial, proxy=None, **task_fields) -> TrialOutcome``."""
    import optuna

    from hpsearch.search._optuna import trial_id_of
    from hpsearch.storage import JOURNAL_PREFIX, ProxyAddress, open_storage
    from hpsearch.tracking import StudyTracker
    from hpsearch.trial import TrialTask
    from hpsearch.worker._runner import run_trial

    url = f"{JOURNAL_PREFIX}{tmp_path / 'optuna.journal'}"
    study = optuna.create_study(
        study_name=spec.name,
        storage=open_storage(url),
        sampler=sampler,
        direction=spec.direction.value,
    )
    target = StudyTracker(
        f"sqlite:///{tmp_path / 'mlflow.db'}", "e", spec.name, metric="value", artifact_root=None
    ).open(storage_url=url, tags={}, spec_yaml=f"name: {spec.name}\n")
    study_dir = tmp_path / spec.name
    study_dir.mkdir(exist_ok=True)

    def send(trial, proxy=None, **fields):
        """Run ``trial``; with ``proxy`` (an address), through the gRPC proxy at it."""
        return run_trial(
            TrialTask(
                spec.name,
                trial_id_of(trial),
                trial.number,
                spec,
                proxy or ProxyAddress("127.0.0.1", 1),  # unused without one
                target,
                str(study_dir),
                [],
                storage_url=None if proxy else url,
                **fields,
            )
        )

    return study, send


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, for a server a test starts.

    Each test process takes ports from its own block below the kernel's ephemeral range
    (32768 and up), so neither another test process nor an outgoing connection of this
    machine can take the port between this answer and the server's bind."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 20_000 + 500 * (int(worker) % 20 if worker.isdigit() else 0)
    for _ in range(500):
        port = base + next(_PORTS) % 500
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: by a server of an earlier test still closing, say
            return port
    raise RuntimeError(f"no free port in {base}-{base + 499}")


@pytest.fixture(scope="module")
def _two_slot_cluster():
    shared = SharedCluster(gpus=None, gpus_per_trial=2, n_slots=2)
    yield shared
    shared.close()


@pytest.fixture
def two_slot_client(_two_slot_cluster):
    """A local cluster with one worker owning 2 CPU slots: trials of 2 ranks run there (one
    cluster per test module, so that a module's trials reuse its warm rank processes)."""
    return _two_slot_cluster.get()
