"""Faults lose nothing: real processes, real kills, bounded waits, no timing assertions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study

from .conftest import mlflow_runs

pytestmark = pytest.mark.slow


def _journal_study(run_dir: Path, name: str) -> optuna.Study | None:
    journal = run_dir / name / "optuna.journal"
    if not journal.exists():
        return None
    try:
        return optuna.load_study(
            study_name=name, storage=JournalStorage(JournalFileBackend(str(journal)))
        )
    except KeyError:  # the file is there, the study not yet
        return None


def _slow_cnn(name: str, *, n_trials: int, epochs: int = 10, max_retries: int = 2) -> dict:
    """CNN trials of about a second an epoch here, checkpointed every epoch, never pruned."""
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": {"name": "digits", "size": 28},
            "epochs": epochs,
            "precision": "fp32",
            "checkpoint_interval": 0,
            "params": {"batch_size": 32, "channels": 16, "n_blocks": 2},
        },
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
        "search": {
            "n_trials": n_trials,
            "sampler": "random",
            "pruner": "none",
            "seed": 0,
            "max_retries": max_retries,
        },
    }


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _trial_in_epoch(run_dir: Path, name: str, at_least: int):
    """A running trial that has reported ``at_least`` epochs and whose checkpoint of that
    epoch has landed (checkpoints are written in the background, after the report: a kill
    before the write lands resumes from the epoch before, as documented)."""
    from hpsearch.trial._checkpoint import CheckpointStore

    study = _journal_study(run_dir, name)
    if study is None:
        return None
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if len(t.intermediate_values) < at_least:
            continue
        state = CheckpointStore(run_dir / name / "checkpoints", t.number).load()
        if state is not None and int(state.get("epoch", 0)) >= at_least:
            return t
    return None


def _kill_worker_running(client, trial_number: int) -> int | None:
    """SIGKILL the worker process that runs ``trial_number``; return its pid (``None`` when
    no worker runs it: it ended meanwhile)."""
    processing = client.processing()
    for address, keys in processing.items():
        if any(f"-trial-{trial_number}-" in str(k) for k in keys):
            pid = client.run(os.getpid, workers=[address])[address]
            os.kill(pid, signal.SIGKILL)
            return pid
    return None


def _kill_a_trial_in_epoch(client, run_dir: Path, name: str, at_least: int):
    """SIGKILL the worker of a running trial ``at_least`` epochs in (checkpoint landed);
    return the trial. One that ends between the look and the kill (a loaded machine) is
    passed over for the next."""

    def kill():
        victim = _trial_in_epoch(run_dir, name, at_least)
        return victim if victim and _kill_worker_running(client, victim.number) else None

    return _wait(kill, 180, f"a trial {at_least} epoch(s) in, to kill")


@pytest.fixture
def cluster_client():
    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    cluster = start_local_cluster(n_workers=2, gpus_per_trial=1)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close(timeout=20)


def _run_in_thread(study: Study):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=study.run()), daemon=True)
    thread.start()
    return thread, box


def test_a_killed_worker_resumes_its_trial_from_the_checkpoint(run_dir, cluster_client):
    study = Study(
        _slow_cnn("kill-resume", n_trials=2, epochs=5), run_dir=run_dir, client=cluster_client
    )
    thread, box = _run_in_thread(study)
    victim = _kill_a_trial_in_epoch(cluster_client, run_dir, "kill-resume", 2)
    thread.join(timeout=300)
    assert "result" in box, "the study goes on and ends"

    trials = _journal_study(run_dir, "kill-resume").get_trials()
    assert len(trials) == 2 and all(t.state == TrialState.COMPLETE for t in trials), [
        (t.state, t.user_attrs) for t in trials
    ]
    resumed = trials[victim.number]
    assert resumed.user_attrs["hpsearch.attempt"] == 2
    assert sorted(resumed.intermediate_values) == [1, 2, 3, 4, 5]

    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "kill-resume")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    trial_runs = [r for r in runs if r.data.tags.get("hpsearch.trial_number") == str(victim.number)]
    assert len(trial_runs) == 1, "the resumed trial continues its run"
    run = trial_runs[0]
    assert int(run.data.tags["hpsearch.resumed_from_epoch"]) >= 2, (
        "it resumed from a checkpoint, not from scratch"
    )
    assert run.data.tags["hpsearch.attempt"] == "2"
    for key in ("val_accuracy", "train_loss", "val_loss"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == [1, 2, 3, 4, 5], f"{key}: every epoch exactly once"


def test_a_trial_lost_more_than_max_retries_fails_with_the_reason(run_dir, cluster_client):
    study = Study(
        _slow_cnn("kill-fail", n_trials=2, epochs=5, max_retries=0),
        run_dir=run_dir,
        client=cluster_client,
    )
    thread, box = _run_in_thread(study)
    victim = _kill_a_trial_in_epoch(cluster_client, run_dir, "kill-fail", 1)
    thread.join(timeout=300)
    assert "result" in box
    trials = _journal_study(run_dir, "kill-fail").get_trials()
    lost = trials[victim.number]
    assert lost.state == TrialState.FAIL
    assert lost.user_attrs["hpsearch.fail_reason"].startswith("worker lost 1 time: ")
    other = [t for t in trials if t.number != victim.number]
    assert all(t.state == TrialState.COMPLETE for t in other), "the study goes on"
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "kill-fail")
    (run,) = [r for r in runs if r.data.tags.get("hpsearch.trial_number") == str(victim.number)]
    assert run.info.status == "FAILED" and run.data.tags["hpsearch.state"] == "FAIL"
    assert run.data.tags["hpsearch.fail_reason"].startswith("worker lost 1 time")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_a_killed_coordinator_resumes_where_it_stopped(tmp_path):
    name = "coord-kill"
    spec = _slow_cnn(name, n_trials=3, epochs=5)  # two running at the kill, one not begun
    spec["cluster"] = {"n_workers": 2}
    study_file = tmp_path / f"{name}.yaml"
    study_file.write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "runs"
    cmd = [sys.executable, "-m", "hpsearch.cli", "run", str(study_file), "--run-dir", str(run_dir)]
    env = {**os.environ, "MLFLOW_TRACKING_URI": ""}
    env.pop("MLFLOW_TRACKING_URI")
    first = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait(lambda: _trial_in_epoch(run_dir, name, 2), 240, "a trial two epochs in")
        children = _descendants(first.pid)
        assert len(children) >= 2, "the local cluster's worker processes"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        _gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, (
            f"worker processes outlived their coordinator: {[p.cmdline() for p in alive]}"
        )
    finally:
        if first.poll() is None:
            first.kill()
    before = _journal_study(run_dir, name).get_trials()
    running = [t.number for t in before if t.state == TrialState.RUNNING]
    assert running, "the kill left trials RUNNING"
    ended_before = {t.number: t.state for t in before if t.state.is_finished()}

    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stdout + second.stderr
    trials = _journal_study(run_dir, name).get_trials()
    assert len(trials) == 3, "exactly n_trials, no duplicates"
    assert all(t.state == TrialState.COMPLETE for t in trials), [
        (t.number, t.state, t.user_attrs) for t in trials
    ]
    for number, state in ended_before.items():
        assert trials[number].state == state, "ended trials stay as they were"
    for number in running:
        assert trials[number].user_attrs["hpsearch.attempt"] == 2
        assert sorted(trials[number].intermediate_values) == [1, 2, 3, 4, 5]
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", name)
    assert not [r for r in runs if r.info.status == "RUNNING"], "no run left RUNNING"
    trial_runs = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert sorted(int(r.data.tags["hpsearch.trial_number"]) for r in trial_runs) == [0, 1, 2]
    resumed = [r for r in trial_runs if int(r.data.tags["hpsearch.trial_number"]) in running]
    assert any(int(r.data.tags["hpsearch.resumed_from_epoch"]) >= 1 for r in resumed), (
        "resumed from checkpoints"
    )
    for run in resumed:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
        assert sorted(steps) == [1, 2, 3, 4, 5]


def test_a_hanging_trial_ends_at_its_timeout_and_frees_its_slot(run_dir, dask_client):
    from hpsearch.testing import user_spec

    # Trial 1 hangs (two workers: trials 0 and 2 end on the other meanwhile).
    spec = user_spec("hang", "hpsearch.testing.objectives:hangs_on_odd", n_trials=3)
    spec["objective"]["trial_timeout"] = 12  # ample for a trial that ends, on a loaded machine
    worker_pids = list(dask_client.run(os.getpid).values())
    result = Study(spec, run_dir=run_dir, client=dask_client).run()
    assert result.progress.ended == 3
    trials = _journal_study(run_dir, "hang").get_trials()
    for t in trials:
        if t.number % 2:
            assert t.state == TrialState.FAIL
            assert t.user_attrs["hpsearch.fail_reason"].startswith(
                "timed out after 12 s (objective.trial_timeout)"
            )
        else:
            assert t.state == TrialState.COMPLETE
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "hang")
    hung = [r for r in runs if r.data.tags.get("hpsearch.state") == "FAIL"]
    assert len(hung) == 1 and all(
        r.data.tags["hpsearch.error_type"] == "TrialTimeout" for r in hung
    )
    assert all(r.info.status == "FAILED" for r in hung)
    # The processes that ran the hung trials were killed; the workers themselves live on.
    for run in hung:
        pid = int(run.data.tags["hpsearch.pid"])
        assert pid not in worker_pids, "a trial with a time limit runs in a process of its own"
        _wait(
            lambda pid=pid: (
                not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            ),
            10,
            f"process {pid} to end",
        )
    assert all(psutil.pid_exists(pid) for pid in worker_pids)


def test_a_truncated_checkpoint_is_ignored(tmp_path):
    from hpsearch.trial._checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path, 7)
    store.save({"epoch": 1, "w": list(range(100))}, background=False)
    store.save({"epoch": 2, "w": list(range(100))}, background=False)
    assert store.load()["epoch"] == 2
    data = store.latest.read_bytes()
    store.latest.write_bytes(data[: len(data) // 2])  # a write cut short
    assert store.load()["epoch"] == 1, "the previous good checkpoint"
    store.previous.write_bytes(b"garbage")
    assert store.load() is None, "none verifies: the trial starts from scratch"


@pytest.mark.parametrize("landed", range(1, 4))
def test_a_write_cut_at_any_step_leaves_a_good_checkpoint(tmp_path, landed):
    """A write moves the latest file and its digest aside, then writes the new file and its
    digest: a process killed after any of these steps resumes from the newest epoch whose data
    and digest both landed, never from scratch."""
    import hashlib
    import io

    import torch

    from hpsearch.trial._checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path, 3)
    store.save({"epoch": 1}, background=False)
    store.save({"epoch": 2}, background=False)
    buf = io.BytesIO()
    torch.save({"epoch": 3}, buf)
    digest = store._digest_path
    steps = [
        lambda: os.replace(store.latest, store.previous),
        lambda: os.replace(digest(store.latest), digest(store.previous)),
        lambda: store.latest.write_bytes(buf.getvalue()),
        lambda: digest(store.latest).write_text(hashlib.sha256(buf.getvalue()).hexdigest()),
    ]
    for step in steps[:landed]:
        step()
    assert store.load()["epoch"] == 2
    steps[landed]()
    assert store.load()["epoch"] == (3 if landed == 3 else 2)


def test_out_of_memory_is_recorded_as_such(run_dir, dask_client):
    from hpsearch.testing import user_spec

    spec = user_spec("oom", "hpsearch.testing.objectives:runs_out_of_memory", n_trials=2)
    Study(spec, run_dir=run_dir, client=dask_client).run()
    oom, fine = _journal_study(run_dir, "oom").get_trials()
    assert oom.state == TrialState.FAIL and fine.state == TrialState.COMPLETE
    assert oom.user_attrs["hpsearch.fail_reason"].startswith("out of memory: CUDA out of memory")
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "oom")
    (run,) = [r for r in runs if r.data.tags.get("hpsearch.trial_number") == "0"]
    assert run.data.tags["hpsearch.error_type"] == "OutOfMemoryError"
    assert "traceback.txt" in [a.path for a in client.list_artifacts(run.info.run_id)]


def _local_context(spec, tmp_path, **kwargs):
    """Trial 0's context on this process's CPU, its files under ``tmp_path``."""
    from hpsearch.trial import TrialContext

    return TrialContext(
        spec=spec,
        trial_number=0,
        devices=["cpu"],
        n_threads=1,
        study_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        worker="local",
        resumed=False,
        **kwargs,
    )


def test_a_checkpoint_is_written_only_once_its_epoch_is_reported(tmp_path, monkeypatch):
    """Reports reach the study from a background thread; a checkpoint must not get ahead of
    them, or a kill between the two would resume after an epoch the study never got."""
    from hpsearch.search._optuna import storage_of, trial_id_of
    from hpsearch.spec import StudySpec
    from hpsearch.testing import cnn_spec
    from hpsearch.tracking import StudyTracker, TrialRun
    from hpsearch.training._objective import builtin_objective
    from hpsearch.trial._checkpoint import CheckpointStore
    from hpsearch.trial._tracked import TrackedTrial

    raw = cnn_spec("ckpt-order", n_trials=1, epochs=3)
    raw["objective"]["checkpoint_interval"] = 0  # every epoch
    raw["objective"]["dataset"] = {"name": "digits", "limit": 300}
    spec = StudySpec.from_dict(raw)
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=url, direction="maximize")
    trial_id = trial_id_of(study.ask())
    storage = storage_of(study)
    reader = optuna.storages.RDBStorage(url)  # what a restarted coordinator would read

    slow = storage.set_trial_intermediate_value

    def slow_report(*args, **kwargs):
        time.sleep(0.3)  # a busy coordinator: the report lands well after the epoch ends
        return slow(*args, **kwargs)

    monkeypatch.setattr(storage, "set_trial_intermediate_value", slow_report)
    seen: list[tuple[int, list[int]]] = []
    save = CheckpointStore.save

    def save_and_look(self, state, **kwargs):
        seen.append((state["epoch"], sorted(reader.get_trial(trial_id).intermediate_values)))
        return save(self, state, **kwargs)

    monkeypatch.setattr(CheckpointStore, "save", save_and_look)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    target = StudyTracker(uri, "e", "s", metric="val_accuracy", artifact_root=None).open(
        storage_url="journal://x", tags={}, spec_yaml="name: s\n"
    )
    run = TrialRun(target, 0, tags={}, resume=False)
    trial = TrackedTrial(study, trial_id, run=run, metric="val_accuracy", pruner_name="none")
    builtin_objective(trial, _local_context(spec, tmp_path, run=run))
    assert [epoch for epoch, _ in seen] == [1, 2, 3]
    for epoch, reported in seen:
        assert epoch in reported, f"epoch {epoch} checkpointed before the study had it"


def test_a_user_objectives_checkpoint_waits_for_its_reports(tmp_path, monkeypatch):
    """The checkpoint API of a user objective (``ctx.save_checkpoint``) waits, like the
    built-in epochs, until the study holds the trial's reports before it writes."""
    from hpsearch.spec import StudySpec
    from hpsearch.testing import user_spec
    from hpsearch.trial._checkpoint import CheckpointStore

    order: list[str] = []
    save = CheckpointStore.save

    def save_and_note(self, state, **kwargs):
        order.append(f"save {state['step']}")
        return save(self, state, **kwargs)

    monkeypatch.setattr(CheckpointStore, "save", save_and_note)
    spec = StudySpec.from_dict(user_spec("user-ckpt", "hpsearch.testing.objectives:checkpointed"))
    ctx = _local_context(
        spec, tmp_path, run=None, reports_written=lambda: order.append("reports in the study")
    )
    ctx.save_checkpoint({"step": 1}, step=1)
    ctx.save_checkpoint({"step": 2}, step=2)
    assert order == ["reports in the study", "save 1", "reports in the study", "save 2"]
