"""Real SLURM jobs (the one-node cluster of tests/slurm/start.sh): dask-jobqueue submits them,
their workers join, trials run and end, and no job is left once the study is done."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import free_port

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def _sinfo_ok() -> bool:
    if shutil.which("sbatch") is None:
        return False
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix", "alloc"))


if shutil.which("sbatch") is None:
    pytest.skip("no sbatch: run tests/slurm/start.sh to install SLURM", allow_module_level=True)
if not _sinfo_ok():
    pytest.skip(
        "the SLURM cluster does not answer sinfo (tests/slurm/start.sh starts it)",
        allow_module_level=True,
    )


def _squeue(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True)
    return out.stdout.split()


def test_a_study_runs_on_real_slurm_jobs(tmp_path):
    from hpsearch.tracking import get_client

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,  # its artifacts folder
        start_new_session=True,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        study_file = tmp_path / "s.yaml"
        study_file.write_text(
            "name: onslurm\n"
            'objective: {model: "hpsearch.testing.objectives:staircase", direction: minimize}\n'
            "space: {x: {type: float, low: 0.0, high: 1.0}}\n"
            "search: {n_trials: 3, sampler: random, pruner: none}\n"
            f'tracking: {{mlflow_uri: "http://127.0.0.1:{port}"}}\n'
            "cluster:\n"
            "  backend: slurm\n"
            "  adapt: {minimum: 1, maximum: 2}\n"
            "  slurm: {queue: debug, cores: 1, memory: 1GB, gpus_per_node: 0, "
            f'walltime: "00:10:00", job_script_prologue: ["export PYTHONPATH={ROOT}"]}}\n'
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HPSEARCH_BATCH_WORKER_TIMEOUT_S": "300"}
        proc = subprocess.run(
            [sys.executable, "-m", "hpsearch.cli", "run", str(study_file)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "3 trials ended: 3 complete" in proc.stdout
        deadline = time.monotonic() + 60
        while _squeue("hpsearch-onslurm") and time.monotonic() < deadline:
            time.sleep(1)
        assert not _squeue("hpsearch-onslurm"), "the study's jobs end with it"
        client = get_client(f"http://127.0.0.1:{port}")
        exp = client.get_experiment_by_name("onslurm")
        runs = client.search_runs([exp.experiment_id])
        trials = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
        assert len(trials) == 3 and all(r.info.status == "FINISHED" for r in trials)
        assert not [r for r in runs if r.info.status == "RUNNING"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its worker processes
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
