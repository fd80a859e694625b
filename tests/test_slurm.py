"""Real SLURM jobs (the one-node cluster of tests/slurm/start.sh): dask-jobqueue submits them,
their workers join, trials run and end, and no job is left once the study is done. Jobs follow
the trials (``cluster.adapt``), and a job cancelled mid-trial is a lost worker whose trial
resumes from its checkpoint on another job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from .conftest import free_port, mlflow_runs
from .test_faults import _journal_study, _wait
from .test_tracking_outage import Server

# Jobs start in seconds on an idle machine, in minutes on a loaded one: generous limits.
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]
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


def _squeue(name: str, states: str | None = None) -> list[str]:
    """The ids of the jobs called ``name`` (in ``states``; squeue's default: those not ended)."""
    wanted = ["-t", states] if states else []
    out = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i", *wanted], capture_output=True, text=True
    )
    return out.stdout.split()


#: A job the study holds: asked for or running. One it has ended may stay COMPLETING a while
#: (long on a loaded machine); it no longer counts against ``adapt.maximum``.
HELD = "PENDING,CONFIGURING,RUNNING"


class _JobWatch:
    """Polls ``squeue`` for a study's jobs while it runs: every job seen, and the most at once."""

    def __init__(self, name: str) -> None:
        self.name = f"hpsearch-{name}"
        self.seen: set[str] = set()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.seen.update(_squeue(self.name))
            self.peak = max(self.peak, len(_squeue(self.name, HELD)))
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def wait_empty(self, timeout: float = 60) -> list[str]:
        """The study's jobs still queued or running after ``timeout`` seconds (none, at best)."""
        deadline = time.monotonic() + timeout
        while _squeue(self.name) and time.monotonic() < deadline:
            time.sleep(1)
        return _squeue(self.name)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """An MLflow server on 127.0.0.1 (the jobs' workers cannot write a file store of this
    machine), shared by this module's studies; its URI."""
    server = Server(tmp_path_factory.mktemp("mlflow"), free_port())
    server.start()
    try:
        yield server.uri
    finally:
        server.stop()


def _slurm_yaml(uri: str, adapt: str, memory: str = "1GB") -> str:
    return (
        f'tracking: {{mlflow_uri: "{uri}"}}\n'
        "cluster:\n"
        "  backend: slurm\n"
        f"  adapt: {adapt}\n"
        f"  slurm: {{queue: debug, cores: 1, memory: {memory}, gpus_per_node: 0, "
        f'walltime: "00:10:00", job_script_prologue: ["export PYTHONPATH={ROOT}"]}}\n'
    )


def _start(tmp_path: Path, text: str, **extra_env: str) -> subprocess.Popen:
    study_file = tmp_path / "s.yaml"
    study_file.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HPSEARCH_BATCH_WORKER_TIMEOUT_S": "300"}
    env.update(extra_env)  # the batch jobs see it too (sbatch exports the environment)
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch.cli", "run", str(study_file)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the study did not end:\n{out}")
    assert proc.returncode == 0, out
    return out


def test_adapt_starts_jobs_for_queued_trials_from_none_and_ends_them(tmp_path, mlflow_server):
    """``adapt: {minimum: 0}``: no job at the start; jobs are submitted for the queued trials
    (up to the maximum), the trials run on them, and no job is left at the end."""
    watch = _JobWatch("adapting")
    proc = _start(
        tmp_path,
        "name: adapting\n"
        'objective: {model: "hpsearch.testing.objectives:steady", direction: minimize}\n'
        "space: {x: {type: float, low: 0.0, high: 1.0}}\n"
        "search: {n_trials: 4, sampler: random, pruner: none}\n"
        + _slurm_yaml(mlflow_server, "{minimum: 0, maximum: 2}"),
    )
    try:
        out = _finish(proc)
    finally:
        watch.stop()
    assert "4 trials ended: 4 complete" in out, out
    # Four trials queued, one set per job (cores: 1): as many jobs as the maximum allows.
    assert watch.peak == 2, (watch.peak, watch.seen)
    assert not watch.wait_empty(), "the study's jobs end with it"
    _, runs = mlflow_runs(mlflow_server, "adapting")
    trials = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert len(trials) == 4 and all(r.info.status == "FINISHED" for r in trials), (
        out,
        [(r.data.tags, r.info.status) for r in trials],
    )
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_a_job_cancelled_mid_trial_resumes_its_trial_on_a_new_job(tmp_path, mlflow_server):
    """``scancel`` of the job running a trial: a lost worker; the trial goes on from its last
    checkpoint on a job submitted in its place, and ends COMPLETE with each epoch once."""
    watch = _JobWatch("cancelled")
    proc = _start(
        tmp_path,
        "name: cancelled\n"
        "objective:\n"
        "  model: cnn\n"
        "  dataset: {name: digits, size: 28, limit: 600}\n"
        "  epochs: 6\n"
        "  precision: fp32\n"
        "  checkpoint_interval: 0\n"
        "  params: {batch_size: 32, channels: 8, n_blocks: 1}\n"
        "space: {lr: {type: float, low: 0.001, high: 0.003, log: true}}\n"
        "search: {n_trials: 1, sampler: random, pruner: none, seed: 0, max_retries: 2}\n"
        + _slurm_yaml(mlflow_server, "{minimum: 1, maximum: 1}", memory="2GB"),
    )
    try:

        def one_epoch_in():
            study = _journal_study(tmp_path / "runs", "cancelled")
            if study is None:
                return None
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            # and its checkpoint complete: it is written in the background after the report
            saved = tmp_path / "runs" / "cancelled" / "checkpoints" / "trial-0.pt.sha256"
            return bool(running and running[0].intermediate_values and saved.exists())

        _wait(one_epoch_in, 300, "the trial's first epoch and its checkpoint")
        jobs = _squeue("hpsearch-cancelled")
        assert len(jobs) == 1, jobs
        subprocess.run(["scancel", jobs[0]], check=True, timeout=60)
        out = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        watch.stop()
    assert "1 trials ended: 1 complete" in out or "1 trial ended: 1 complete" in out, out
    assert len(watch.seen) >= 2 and jobs[0] in watch.seen, f"a new job took the trial: {out}"
    assert not watch.wait_empty(), "the study's jobs end with it"
    (trial,) = _journal_study(tmp_path / "runs", "cancelled").get_trials()
    assert trial.state == TrialState.COMPLETE, trial.user_attrs
    assert int(trial.user_attrs["hpsearch.attempt"]) == 2
    assert sorted(trial.intermediate_values) == [1, 2, 3, 4, 5, 6]
    client, runs = mlflow_runs(mlflow_server, "cancelled")
    (run,) = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["hpsearch.resumed_from_epoch"]) >= 1, "resumed, not restarted"
    for key in ("val_accuracy", "train_loss"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == [1, 2, 3, 4, 5, 6], f"{key}: every epoch exactly once"


def test_a_job_warned_before_its_end_hands_its_trial_on_losing_no_epoch(tmp_path, mlflow_server):
    """SLURM's warning before a job ends (``--signal=B:USR1@N``, sent here by ``scancel
    --batch --signal=USR1``): the trial writes its checkpoint at the epoch's end and yields,
    the worker retires, and the trial resumes on a new job: not a lost worker (none are
    allowed here), each epoch trained and reported once."""
    from hpsearch.worker._preload import JOB_ENDS

    watch = _JobWatch("warned")
    held = tmp_path / "held"
    proc = _start(
        tmp_path,
        "name: warned\n"
        "objective:\n"
        "  model: cnn\n"
        "  dataset: {name: digits, size: 28, limit: 600}\n"
        "  epochs: 6\n"
        "  precision: fp32\n"
        "  checkpoint_interval: 0\n"
        "  params: {batch_size: 32, channels: 8, n_blocks: 1}\n"
        "space: {lr: {type: float, low: 0.001, high: 0.003, log: true}}\n"
        "search: {n_trials: 1, sampler: random, pruner: none, seed: 0, max_retries: 0}\n"
        + _slurm_yaml(mlflow_server, "{minimum: 1, maximum: 1}", memory="2GB"),
        # The trial waits after its first epoch's checkpoint until it is asked to yield: the
        # warning comes mid-trial however fast the epochs are.
        HPSEARCH_FAULT="after_checkpoint:0:1:hold",
        HPSEARCH_FAULT_HELD=str(held),
    )
    try:
        _wait(held.exists, 300, "the trial's first epoch")
        jobs = _squeue("hpsearch-warned")
        assert len(jobs) == 1, jobs
        subprocess.run(["scancel", "--batch", "--signal=USR1", jobs[0]], check=True, timeout=60)
        out = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        watch.stop()
    assert "1 complete" in out, out
    assert len(watch.seen) >= 2 and jobs[0] in watch.seen, f"a new job took the trial: {out}"
    assert not watch.wait_empty(), "the study's jobs end with it"
    (trial,) = _journal_study(tmp_path / "runs", "warned").get_trials()
    assert trial.state == TrialState.COMPLETE, trial.user_attrs
    assert trial.user_attrs["hpsearch.preempted"] == JOB_ENDS
    assert sorted(trial.intermediate_values) == [1, 2, 3, 4, 5, 6]
    client, runs = mlflow_runs(mlflow_server, "warned")
    (run,) = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert run.info.status == "FINISHED"
    assert run.data.tags["hpsearch.preempted"] == JOB_ENDS
    assert int(run.data.tags["hpsearch.resumed_from_epoch"]) >= 1, "resumed, not restarted"
    for key in ("val_accuracy", "train_loss"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == [1, 2, 3, 4, 5, 6], f"{key}: every epoch exactly once"
