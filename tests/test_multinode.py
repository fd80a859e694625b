"""Multi-node on one machine: a `dask scheduler`, `hpsearch worker` and plain `dask worker`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from hpsearch import Study
from hpsearch.testing import user_spec

from .conftest import free_port

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)


def start_scheduler(port: int, env: dict[str, str], *flags: str) -> subprocess.Popen:
    """``dask scheduler`` on 127.0.0.1:``port``, in a process group of its own."""
    return subprocess.Popen(
        [
            f"{BIN}/dask",
            "scheduler",
            *flags,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dashboard-address",
            "127.0.0.1:0",
        ],
        env=env,
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )


def start_worker(
    address: str, env: dict[str, str], name: str, *flags: str, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen:
    """``hpsearch worker`` of one CPU slot named ``name`` joining ``address``, in a process
    group of its own."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "hpsearch.cli", "worker", address),
            *("--gpus", "none", "--slots", "1", "--name", name, *flags),
        ],
        env=env,
        start_new_session=True,
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _wait_workers(address: str, n: int, timeout: float = 90) -> dict:
    from distributed import Client

    with Client(address, timeout=30) as client:
        client.wait_for_workers(n, timeout=timeout)
        return client.scheduler_info(n_workers=-1)["workers"]


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group (the last started first), then SIGKILL what is left after 20 s."""
    for p in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def test_hpsearch_worker_and_plain_dask_worker_join_a_scheduler(run_dir, tmp_path):
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [start_scheduler(port, env)]
    try:
        procs.append(start_worker(address, env, "hp", stdout=subprocess.PIPE))
        # The documented by-hand path: plain dask worker, resources and devices set by hand.
        procs.append(
            subprocess.Popen(
                [
                    f"{BIN}/dask",
                    "worker",
                    address,
                    "--name",
                    "plain",
                    "--nthreads",
                    "1",
                    "--resources",
                    "SLOT=1",
                    "--preload",
                    "hpsearch.preload",
                ],
                env={**env, "HPSEARCH_DEVICE_KIND": "cpu"},
                start_new_session=True,
                stderr=subprocess.DEVNULL,
            )
        )
        workers = _wait_workers(address, 2)
        assert sorted(w["name"] for w in workers.values()) == ["hp-0", "plain"]
        assert all(w["resources"] == {"SLOT": 1.0} for w in workers.values())
        spec = user_spec("remote", "hpsearch.testing.objectives:staircase", n_trials=8)
        spec["cluster"] = {"address": address}
        result = Study(spec, run_dir=run_dir).run()
        assert result.progress.ended == 8
        study = optuna.load_study(
            study_name="remote",
            storage=JournalStorage(JournalFileBackend(str(run_dir / "remote" / "optuna.journal"))),
        )
        assert {t.user_attrs["hpsearch.worker"] for t in study.trials} <= set(workers)
        assert len(study.trials) == 8
        spec["objective"]["gpus_per_trial"] = 2
        spec["name"] = "too-big"
        from hpsearch.exceptions import ClusterError

        with pytest.raises(ClusterError, match="gpus_per_trial=2"):
            Study(spec, run_dir=run_dir).run()
        assert not (run_dir / "too-big").exists(), "a study the cluster cannot run creates nothing"
    finally:
        stop_processes(procs)


def test_a_closing_worker_keeps_its_heartbeat_traceback_to_itself():
    import logging
    from types import SimpleNamespace

    from distributed.core import Status

    from hpsearch.worker._preload import _QuietWhileClosing

    worker = SimpleNamespace(status=Status.running)
    quiet = _QuietWhileClosing(worker)

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("distributed.worker", logging.ERROR, "", 0, msg, None, None)

    heartbeat = "Failed to communicate with scheduler during heartbeat."
    assert quiet.filter(record(heartbeat))  # while running, a lost scheduler is news
    worker.status = Status.closing
    assert not quiet.filter(record(heartbeat))
    assert quiet.filter(record("Compute Failed"))  # everything else still gets through
