"""SLURM job scripts and Kubernetes manifests rendered by the real libraries, and a cluster
whose workers join and leave while a study runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from hpsearch import Study
from hpsearch.cluster._batch import kubernetes_manifest, slurm_job_script
from hpsearch.cluster.jobqueue_worker import parse
from hpsearch.exceptions import SpecError
from hpsearch.spec import StudySpec
from hpsearch.testing import user_spec

from .conftest import free_port

SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}}


def _spec(cluster: dict, gpus_per_trial: int = 2) -> StudySpec:
    return StudySpec.from_dict(
        {
            "name": "big_run",
            "objective": {"model": "cnn", "gpus_per_trial": gpus_per_trial},
            "space": SPACE,
            "cluster": cluster,
        }
    )


@pytest.mark.parametrize(
    ("slurm", "expected"),
    [
        (
            {
                "queue": "gpu",
                "account": "ml-team",
                "walltime": "12:00:00",
                "gpus_per_node": 4,
                "cores": 32,
                "memory": "128GB",
                "job_script_prologue": ["module load cuda/12.4", "source ~/venvs/hps/bin/activate"],
                "job_extra_directives": ["--constraint=a100"],
                "python": "python3",
            },
            [
                "#SBATCH -J hpsearch-big_run",
                "#SBATCH -p gpu",
                "#SBATCH -A ml-team",
                "#SBATCH -n 1",
                "#SBATCH --cpus-per-task=32",
                "#SBATCH -t 12:00:00",
                "#SBATCH --gres=gpu:4",
                "#SBATCH --constraint=a100",
                "module load cuda/12.4",
                "source ~/venvs/hps/bin/activate",
            ],
        ),
        (
            {
                "queue": "cpu",
                "gpus_per_node": 0,
                "cores": 4,
                "memory": "8GB",
                "python": "/opt/py/bin/python",
            },
            ["#SBATCH -p cpu", "#SBATCH --cpus-per-task=4", "#SBATCH -t 01:00:00"],
        ),
    ],
    ids=["gpu-nodes", "cpu-nodes"],
)
def test_slurm_job_script(slurm, expected):
    spec = _spec({"backend": "slurm", "slurm": slurm})
    script = slurm_job_script(spec, scheduler="tcp://login01:8786")
    lines = script.strip().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    for line in expected:
        assert line in lines, (line, script)
    if not slurm["gpus_per_node"]:
        assert not [line for line in lines if "--gres" in line], "no GPU request for CPU nodes"
    # The launcher replaces the batch shell (exec): SLURM's warning before the job ends
    # (--signal=B:USR1@60) reaches it.
    assert "#SBATCH --signal=B:USR1@60" in lines
    worker = lines[-1].split()
    assert worker[:5] == [
        "exec",
        slurm["python"],
        "-m",
        "hpsearch.cluster.jobqueue_worker",
        "tcp://login01:8786",
    ]
    args = parse(worker[4:])
    assert args.scheduler == "tcp://login01:8786" and args.gpus_per_trial == 2
    assert args.gpus == ("auto" if slurm["gpus_per_node"] else "none")
    assert lines.index(expected[-1]) < len(lines) - 1, "the prologue runs before the worker"


def test_kubernetes_manifest():
    spec = _spec(
        {
            "backend": "kubernetes",
            "kubernetes": {
                "image": "registry.example/hpsearch:0.1",
                "namespace": "ml",
                "workers": 3,
                "gpus_per_worker": 2,
                "cpu": "8",
                "memory": "32G",
                "env": {"MLFLOW_TRACKING_URI": "http://mlflow:5000"},
            },
        }
    )
    manifest = kubernetes_manifest(spec)
    text = yaml.safe_dump(manifest)
    assert manifest["kind"] == "DaskCluster" and manifest["metadata"] == {
        "name": "hpsearch-big-run",
        "namespace": "ml",
    }
    worker_spec = manifest["spec"]["worker"]
    assert worker_spec["replicas"] == 3
    (worker,) = worker_spec["spec"]["containers"]
    assert worker["image"] == "registry.example/hpsearch:0.1"
    assert worker["resources"]["limits"] == {"cpu": "8", "memory": "32G", "nvidia.com/gpu": "2"}
    assert worker["args"][:3] == ["python", "-m", "hpsearch.cluster.jobqueue_worker"]
    assert worker["args"][-4:] == ["--gpus", "auto", "--gpus-per-trial", "2"]
    assert {"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow:5000"} in worker["env"]
    (scheduler,) = manifest["spec"]["scheduler"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in str(scheduler["resources"]), "the scheduler asks for no GPU"
    assert "nvidia.com/gpu: '2'" in text


def test_the_operator_worker_command_reads_the_scheduler_from_the_environment(monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://hpsearch-big-run-scheduler:8786")
    args = parse(
        [
            "--name",
            "w-1",
            "--dashboard",
            "--dashboard-address",
            "8788",
            "--gpus",
            "auto",
            "--gpus-per-trial",
            "2",
        ]
    )
    assert args.scheduler == "tcp://hpsearch-big-run-scheduler:8786" and args.name == "w-1"


@pytest.mark.parametrize(
    ("cluster", "field", "words"),
    [
        ({"backend": "slurm"}, "cluster.slurm", ["required with backend: slurm"]),
        ({"backend": "kubernetes", "kubernetes": {}}, "cluster.kubernetes.image", ["required"]),
        ({"backend": "lsf"}, "cluster.backend", ["local, slurm, kubernetes"]),
        ({"adapt": {"maximum": 4}}, "cluster.adapt", ["only slurm and kubernetes"]),
        (
            {"backend": "slurm", "slurm": {"queue": "q"}, "adapt": {"minimum": 5, "maximum": 2}},
            "cluster.adapt",
            ["minimum (5) must be <= maximum (2)"],
        ),
        (
            {"backend": "slurm", "slurm": {"queue": "q"}, "address": "tcp://x:1"},
            "cluster.address",
            ["not used with backend: slurm"],
        ),
        (
            {"storage_access": "direct"},
            "cluster.storage_access",
            ["needs a database URL in storage"],
        ),
        ({"tls": "auto", "address": "tcp://x:1"}, "cluster.tls", ["local cluster only"]),
        (
            {"tls": {"ca_file": "/nowhere/ca.pem", "cert": __file__, "key": __file__}},
            "cluster.tls.ca_file",
            ["no such file: /nowhere/ca.pem"],
        ),
    ],
)
def test_bad_batch_settings_are_one_line(cluster, field, words):
    with pytest.raises(SpecError) as info:
        _spec(cluster)
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"<study>: {field}: "), line
    assert all(w in line for w in words), line


def test_cli_dry_run_prints_without_submitting(tmp_path):
    study = tmp_path / "slurm.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "on-slurm",
                "objective": {"model": "cnn", "gpus_per_trial": 2},
                "space": SPACE,
                "cluster": {"backend": "slurm", "slurm": {"queue": "gpu", "gpus_per_node": 8}},
                "tracking": {"mlflow_uri": "http://mlflow.internal:5000"},
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "hpsearch.cli", "run", str(study), "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --gres=gpu:8" in out.stdout and "hpsearch.cluster.jobqueue_worker" in out.stdout
    assert not (tmp_path / "runs").exists(), "a dry run creates nothing"


@pytest.mark.slow
def test_workers_joining_and_leaving_mid_study(run_dir):
    """What an adaptive cluster does, on one machine: a worker joins late, another leaves."""
    from distributed import Client

    from .test_multinode import _wait_workers, start_scheduler, stop_processes

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    worker = [
        sys.executable,
        "-m",
        "hpsearch.cli",
        "worker",
        address,
        "--gpus",
        "none",
        "--slots",
        "1",
    ]
    procs = [start_scheduler(port, env)]
    try:
        procs.append(
            subprocess.Popen(
                [*worker, "--name", "first"],
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_workers(address, 1)
        spec = user_spec("elastic", "hpsearch.testing.objectives:steady", n_trials=8)
        spec["cluster"] = {"address": address}
        study = Study(spec, run_dir=run_dir)
        box: dict = {}
        thread = threading.Thread(
            target=lambda: box.update(result=study.run(progress=False)), daemon=True
        )
        thread.start()

        def ended() -> int:
            try:
                return sum(
                    t.state.is_finished() for t in study.optuna_study().get_trials(deepcopy=False)
                )
            except KeyError:
                return 0

        deadline = time.monotonic() + 120
        while ended() < 1 and time.monotonic() < deadline:
            time.sleep(0.3)
        procs.append(
            subprocess.Popen(
                [*worker, "--name", "second"],
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 120
        while ended() < 4 and time.monotonic() < deadline:
            time.sleep(0.3)
        os.killpg(procs[1].pid, signal.SIGTERM)  # the first worker leaves (its job ended)
        thread.join(timeout=300)
        assert "result" in box, "the study goes on as workers come and go"
        trials = study.optuna_study().get_trials()
        assert len(trials) == 8 and all(t.state.name == "COMPLETE" for t in trials), [
            (t.number, t.state, t.user_attrs) for t in trials
        ]
        names = {t.user_attrs["hpsearch.worker"] for t in trials}
        with Client(address, timeout=30) as client:
            second = {
                a
                for a, w in client.scheduler_info(n_workers=-1)["workers"].items()
                if w["name"].startswith("second")
            }
        assert second & names, "the worker that joined late ran trials"
        assert len(names) >= 2
    finally:
        stop_processes(procs)


def test_slurm_cluster_takes_the_options():
    """The real SLURMCluster accepts them (nothing is submitted: no job is asked for)."""
    from dask_jobqueue import SLURMCluster

    from hpsearch.cluster._batch import slurm_options

    spec = _spec({"backend": "slurm", "slurm": {"queue": "gpu", "gpus_per_node": 4, "jobs": 2}})
    cluster = SLURMCluster(**slurm_options(spec))
    try:
        script = cluster.job_script()
        assert "#SBATCH --gres=gpu:4" in script
        assert f"-m hpsearch.cluster.jobqueue_worker {cluster.scheduler_address}" in script
        assert not cluster.workers, "nothing submitted"
    finally:
        cluster.close()


def test_slurm_jobs_without_a_warning():
    spec = _spec(
        {"backend": "slurm", "slurm": {"queue": "q", "gpus_per_node": 0, "warning_seconds": 0}}
    )
    script = slurm_job_script(spec, scheduler="tcp://login01:8786")
    assert "--signal" not in script and "exec " not in script
