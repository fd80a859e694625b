"""A real MLflow tracking server that stops during a study and comes back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.testing import user_spec

from .conftest import free_port, mlflow_runs

pytestmark = pytest.mark.slow


#: MLflow 3's server also starts a job runner and seven huey consumers for its GenAI jobs
#: (each a Python process importing MLflow, polling while idle); a study's server needs none.
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


class Server:
    """``mlflow server`` on 127.0.0.1, in its own process group (it leaves children behind)."""

    def __init__(self, folder, port: int) -> None:
        self.folder, self.port = folder, port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.backend = f"sqlite:///{folder / 'mlflow.db'}"

    def start(self, timeout: float = 120.0) -> None:
        with open(self.folder / "server.log", "ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mlflow",
                    "server",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--backend-store-uri",
                    self.backend,
                    "--artifacts-destination",
                    str(self.folder / "artifacts"),
                    "--workers",
                    "1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **SERVER_ENV},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        pytest.fail(f"mlflow server did not answer in {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.proc = None


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path, free_port())
    srv.start()
    yield srv
    srv.stop()


def _ended(study: Study) -> int:
    try:
        return sum(t.state.is_finished() for t in study.optuna_study().get_trials(deepcopy=False))
    except KeyError:
        return 0


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _check_runs(uri: str, name: str, n: int) -> None:
    client, runs = mlflow_runs(uri, name)
    assert not [r for r in runs if r.info.status == "RUNNING"], "no run left RUNNING"
    parent = [r for r in runs if r.data.tags.get("hpsearch.role") == "study"]
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    trials = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert sorted(int(r.data.tags["hpsearch.trial_number"]) for r in trials) == list(range(n))
    for run in trials:
        assert run.data.tags["hpsearch.state"] == "COMPLETE"
        for key in ("value", "other"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            assert sorted(steps) == list(range(1, 9)), (
                f"trial {run.data.tags['hpsearch.trial_number']} {key}: every step once"
            )


def test_tracking_server_down_and_back_mid_study_loses_nothing(
    server, run_dir, dask_client, monkeypatch
):
    # 1. Down for a while in the middle of a study: the writes wait in the workers.
    spec = user_spec("outage", "hpsearch.testing.objectives:steady", n_trials=6)
    spec["tracking"] = {"mlflow_uri": server.uri}
    study = Study(spec, run_dir=run_dir, client=dask_client)
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=study.run()), daemon=True)
    thread.start()
    _wait(lambda: _ended(study) >= 1, 120, "a first trial")
    server.stop()
    _wait(lambda: _ended(study) >= 3, 120, "trials ending while the server is down")
    server.start()
    thread.join(timeout=240)
    assert "result" in box, "the study ended"
    assert all(t.state == TrialState.COMPLETE for t in study.optuna_study().get_trials())
    _check_runs(server.uri, "outage", 6)

    # 2. Down until the end: what could not be written is kept on disk, and the next run writes it.
    monkeypatch.setenv("HPSEARCH_TRACKING_FLUSH_S", "3")
    spec = user_spec("outage-end", "hpsearch.testing.objectives:steady", n_trials=4)
    spec["tracking"] = {"mlflow_uri": server.uri}
    study = Study(spec, run_dir=run_dir, client=dask_client)
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=study.run()), daemon=True)
    thread.start()
    _wait(lambda: _ended(study) >= 1, 120, "a first trial")
    server.stop()
    thread.join(timeout=240)
    assert "result" in box, "the study ends with the server down"
    backlog = run_dir / "outage-end" / "tracking-backlog"
    assert list(backlog.glob("*.json")), "the writes that could not be made are on disk"
    server.start()
    Study(
        spec, run_dir=run_dir, client=dask_client
    ).run()  # nothing left to run: it writes the backlog
    assert not backlog.exists()
    _check_runs(server.uri, "outage-end", 4)
