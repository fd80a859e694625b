"""Data-parallel trials for real: gloo ranks in their own processes, on CPU slots."""

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
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.testing import user_spec

from .conftest import mlflow_runs

pytestmark = pytest.mark.slow


def _study(run_dir, name):
    return optuna.load_study(
        study_name=name,
        storage=JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal"))),
    )


def _lines(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _cnn(name, size, epochs=3):
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "epochs": epochs,
            "precision": "fp32",
            "gpus_per_trial": size,
            "params": {"batch_size": 64, "dropout": 0.0},
            "checkpoint_interval": 0,
        },
        "space": {"lr": {"type": "categorical", "choices": [0.003]}},
        "search": {"n_trials": 1, "sampler": "random", "pruner": "none", "seed": 0},
    }


def test_two_rank_trial_learns_and_matches_one_rank(run_dir, two_slot_client):
    Study(_cnn("one-rank", 1), run_dir=run_dir, client=two_slot_client).run()
    Study(_cnn("two-ranks", 2), run_dir=run_dir, client=two_slot_client).run()
    one, two = _study(run_dir, "one-rank").trials[0], _study(run_dir, "two-ranks").trials[0]
    assert one.state == two.state == TrialState.COMPLETE
    assert two.value > 0.8, "the 2-rank trial learns"
    for step in (1, 2, 3):
        assert two.intermediate_values[step] == pytest.approx(
            one.intermediate_values[step], abs=0.03
        )
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "two-ranks")
    (run,) = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert run.data.tags["hpsearch.world_size"] == "2"
    assert run.data.tags["hpsearch.devices"] == "slot:0,slot:1"
    assert run.data.tags["hpsearch.precision"] == "fp32"
    assert run.data.metrics["samples_per_s"] > 0
    loss1 = client.get_metric_history(run.info.run_id, "train_loss")
    _, runs1 = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "one-rank")
    (run1,) = [r for r in runs1 if "hpsearch.trial_number" in r.data.tags]
    loss0 = client.get_metric_history(run1.info.run_id, "train_loss")
    assert [m.value for m in loss1] == pytest.approx([m.value for m in loss0], rel=0.05)


def test_pruning_stops_every_rank_at_the_same_step(run_dir, two_slot_client):
    spec = user_spec(
        "ddp-prune", "hpsearch.testing.objectives:ranked_staircase", n_trials=8, max_concurrent=1
    )
    spec["objective"]["gpus_per_trial"] = 2
    spec["search"]["pruner"] = {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0}
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    study = _study(run_dir, "ddp-prune")
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "some trials are pruned"
    for t in study.trials:
        steps = [
            (run_dir / "ddp-prune" / f"notes-{t.number}-rank{r}.txt").read_text().split("\n")[:-1]
            for r in (0, 1)
        ]
        assert steps[0] == steps[1], "both ranks ran the same steps"
        if t.state == TrialState.PRUNED:
            assert steps[0][-1] == f"step {max(t.intermediate_values)}"
        else:
            assert len(steps[0]) == 5


def test_every_rank_holds_a_full_optuna_trial(run_dir, two_slot_client):
    import json

    spec = user_spec("ddp-api", "hpsearch.testing.objectives:trial_api", n_trials=1)
    spec["objective"]["gpus_per_trial"] = 2
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    (trial,) = _study(run_dir, "ddp-api").trials
    assert trial.state == TrialState.COMPLETE
    seen = [json.loads((run_dir / "ddp-api" / f"notes-0-rank{r}.txt").read_text()) for r in (0, 1)]
    assert seen[0] == seen[1], "every rank sees the same trial"
    assert seen[0] == {
        "base_trial": True,
        "number": 0,
        "params": trial.params,
        "distributions": ["depth", "x"],
        "attempt": 1,
        "depth_seen": trial.params["depth"],
        "started": True,
    }
    assert trial.user_attrs["depth_seen"] == trial.params["depth"]
    assert trial.value == pytest.approx(trial.params["x"] + trial.params["depth"])


def test_a_rank_that_raises_fails_the_trial_without_a_hang(run_dir, two_slot_client):
    spec = user_spec(
        "ddp-raise", "hpsearch.testing.objectives:rank1_raises", n_trials=2, max_concurrent=1
    )
    spec["objective"]["gpus_per_trial"] = 2
    spec["search"]["pruner"] = "none"
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    trials = _study(run_dir, "ddp-raise").trials
    assert trials[0].state == TrialState.FAIL
    assert "rank 1" in trials[0].user_attrs["hpsearch.fail_reason"]
    assert "broke on purpose" in trials[0].user_attrs["hpsearch.fail_reason"]
    assert trials[1].state == TrialState.COMPLETE, "fresh ranks run the next trial"
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "ddp-raise")
    failed = [r for r in runs if r.data.tags.get("hpsearch.trial_number") == "0"]
    assert (
        failed[0].info.status == "FAILED"
        and "rank 1" in failed[0].data.tags["hpsearch.fail_reason"]
    )


def test_a_killed_worker_leaves_no_rank_process(run_dir):
    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    cluster = start_local_cluster(gpus=None, gpus_per_trial=2, n_slots=2)
    client = Client(cluster)
    try:
        spec = user_spec("ddp-kill", "hpsearch.testing.objectives:ranked_checkpointed", n_trials=1)
        spec["objective"]["gpus_per_trial"] = 2
        spec["objective"]["checkpoint_interval"] = 0
        study = Study(spec, run_dir=run_dir, client=client)
        done = threading.Event()
        thread = threading.Thread(target=lambda: (study.run(), done.set()), daemon=True)
        thread.start()
        (worker_pid,) = client.run(os.getpid).values()
        ranks: list[psutil.Process] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [
                p
                for p in psutil.Process(worker_pid).children(recursive=True)
                if "_rank_main" in " ".join(p.cmdline())
            ]
            time.sleep(0.2)
        assert len(ranks) == 2, "the trial runs on 2 rank processes"
        notes = run_dir / "ddp-kill" / "notes-0-rank1.txt"
        while time.monotonic() < deadline and _lines(notes).count("step") < 3:
            time.sleep(0.1)  # two steps checkpointed, the third under way
        os.kill(worker_pid, signal.SIGKILL)
        _gone, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive, f"rank processes outlived their worker: {[p.pid for p in alive]}"
        thread.join(timeout=120)
        assert done.is_set(), "the study goes on after the kill"
        # It resumed from its checkpoint on every rank: each step reported once, the value
        # of an uninterrupted run, one MLflow run with each step once.
        (trial,) = _study(run_dir, "ddp-kill").trials
        assert trial.state == TrialState.COMPLETE
        x = trial.params["x"]
        assert trial.intermediate_values == pytest.approx({s: x + 1 / s for s in range(1, 7)})
        assert trial.value == pytest.approx(x + 1 / 6)
        for rank in (0, 1):
            steps = _lines(run_dir / "ddp-kill" / f"notes-0-rank{rank}.txt").split()
            trained = [int(s) for s in steps if s.isdigit()]
            assert trained[-1] == 6 and trained.count(1) == 1, f"rank {rank} began again"
        mlflow_client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "ddp-kill")
        (run,) = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
        history = mlflow_client.get_metric_history(run.info.run_id, "value")
        assert sorted(m.step for m in history) == list(range(1, 7))
    finally:
        client.close()
        cluster.close(timeout=20)


def test_trials_of_different_sizes_never_share_a_device(run_dir):
    spec = user_spec(
        "exclusive",
        "hpsearch.testing.objectives:record_devices",
        n_trials=12,
        space={
            "x": {"type": "float", "low": 0.0, "high": 1.0},
            "gpus_per_trial": {"type": "categorical", "choices": [1, 2]},
        },
    )
    spec["search"]["pruner"] = "none"
    spec["cluster"] = {"slots": 4}
    Study(spec, run_dir=run_dir).run()
    trials = _study(run_dir, "exclusive").trials
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.user_attrs for t in trials]
    assert {t.user_attrs["size"] for t in trials} == {1, 2}
    for t in trials:
        assert len(t.user_attrs["devices"]) == t.user_attrs["size"]
    overlapping = 0
    for a in trials:
        for b in trials:
            if a.number < b.number:
                (s1, e1), (s2, e2) = a.user_attrs["span"], b.user_attrs["span"]
                if s1 < e2 and s2 < e1:
                    overlapping += 1
                    assert not set(a.user_attrs["devices"]) & set(b.user_attrs["devices"]), (
                        a.user_attrs,
                        b.user_attrs,
                    )
    assert overlapping, "trials ran concurrently"


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_under_ddp(run_dir, two_slot_client, precision):
    spec = _cnn(f"ddp-{precision}", 2, epochs=2)
    spec["objective"]["precision"] = precision
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    (trial,) = _study(run_dir, f"ddp-{precision}").trials
    assert trial.state == TrialState.COMPLETE and trial.value > 0.5
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", f"ddp-{precision}")
    (run,) = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert run.data.tags["hpsearch.precision"] == precision
    assert run.data.tags["hpsearch.world_size"] == "2"


@pytest.mark.parametrize(
    ("model", "dataset", "space"),
    [
        ("gan", "digits", {"lr": {"type": "categorical", "choices": [0.0002]}}),
        (
            "lstm",
            {"name": "python-docs", "max_chars": 20000},
            {"lr": {"type": "categorical", "choices": [0.01]}},
        ),
    ],
    ids=["gan", "lstm-language-model"],
)
def test_other_families_as_two_rank_trials(run_dir, two_slot_client, model, dataset, space):
    name = f"ddp-{model}"
    spec = {
        "name": name,
        "objective": {
            "model": model,
            "dataset": dataset,
            "epochs": 2,
            "precision": "fp32",
            "gpus_per_trial": 2,
            "params": {"batch_size": 32},
        },
        "space": space,
        "search": {"n_trials": 1, "sampler": "random", "pruner": "none", "seed": 0},
    }
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    (trial,) = _study(run_dir, name).trials
    assert trial.state == TrialState.COMPLETE, trial.user_attrs
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", name)
    (run,) = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert run.data.tags["hpsearch.world_size"] == "2"
    if model == "gan":
        assert {m.step for m in client.get_metric_history(run.info.run_id, "g_loss")} == {1, 2}
        assert [a.path for a in client.list_artifacts(run.info.run_id)].count("samples.png") == 1, (
            "rank 0 logs once"
        )
    else:
        assert trial.value < 40, "perplexity well under the vocabulary size"


_WORKER_WITH_A_RANK = """
import sys, time
from hpsearch.worker._ranks import rank_pool
(proc,) = rank_pool()._get("cpu", [0], 1)  # a warm rank process, as a trial leaves
print(proc.popen.pid, flush=True)
time.sleep(120)
"""


def test_a_rank_process_dies_with_its_worker():
    """A warm rank process holds a device: when its worker is killed (no chance to close its
    pool), the rank goes too, at once (it asks the kernel for a death signal as it starts)."""
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER_WITH_A_RANK], stdout=subprocess.PIPE, text=True
    )
    try:
        rank = int(worker.stdout.readline())
    finally:
        worker.kill()
        worker.wait()

    def alive() -> bool:  # a zombie no init reaps counts as gone
        status = Path(f"/proc/{rank}/status")
        try:
            return "\nState:\tZ" not in status.read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 60
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), "the rank process outlived its worker"


def test_trials_train_in_the_environment_of_a_bare_process(run_dir, two_slot_client):
    """A trial in the worker's own process and one on rank processes: their threads are their
    share of the cores, and their allocator keeps a tensor's memory in the heap instead of
    mapping it anew each time (Dask's nanny would set both against training)."""
    from hpsearch.cluster import cores

    parent_threads = os.environ.get("OMP_NUM_THREADS")
    seen = {}
    for size in (1, 2):
        spec = user_spec(
            f"environment-{size}",
            "hpsearch.testing.objectives:environment",
            n_trials=1,
            space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        )
        spec["search"]["pruner"] = "none"
        spec["objective"]["gpus_per_trial"] = size
        Study(spec, run_dir=run_dir, client=two_slot_client).run()
        (trial,) = _study(run_dir, f"environment-{size}").trials
        assert trial.state == TrialState.COMPLETE, trial.user_attrs
        seen[size] = trial.user_attrs
    worker_pid = next(iter(two_slot_client.run(os.getpid).values()))
    assert seen[1]["pid"] == worker_pid, "the one-slot trial ran in the worker itself"
    assert seen[2]["pid"] != worker_pid, "the two-slot trial ran on rank processes"
    for size, attrs in seen.items():
        assert attrs["maps_each_time"] is False, (size, attrs["env"])
        threads = attrs["ctx_threads"]
        assert attrs["torch_threads"] == threads, (size, attrs)
        assert attrs["env"]["OMP_NUM_THREADS"] == attrs["env"]["MKL_NUM_THREADS"] == str(threads)
    # the worker's 2 slots share its cores: the whole worker's for one, a slot's for a rank
    assert seen[1]["ctx_threads"] == max(1, cores())
    assert seen[2]["ctx_threads"] == max(1, cores() // 2)
    assert os.environ.get("OMP_NUM_THREADS") == parent_threads, "the starting process as it was"


def test_the_rank_processes_of_a_set_start_together(monkeypatch):
    """All of a set's missing rank processes are started before the pool waits for the first
    one (each imports torch first, rank 0 MLflow too); a warm one is kept; one that fails to start
    takes the others started with it down."""
    from hpsearch.worker import _ranks

    pool = _ranks.RankPool()
    calls: list[tuple[str, object]] = []

    class _Popen:
        def __init__(self, device):
            self.pid, self.device = 10_000 + device, device

        def poll(self):
            return None

        def wait(self, timeout=None):
            return 0

    def spawn(kind, device, threads, *, tracks):
        calls.append(("spawn", device, tracks))
        return _Popen(device)

    def hello(popen, key):
        calls.append(("hello", popen.device))
        if popen.device == 3:
            raise RuntimeError("rank process for cpu:3 did not start")
        return object()

    monkeypatch.setattr(pool, "_spawn", spawn)
    monkeypatch.setattr(pool, "_hello", hello)
    monkeypatch.setattr(_ranks.os, "killpg", lambda pid, sig: calls.append(("kill", pid)))
    monkeypatch.setattr(_ranks._RankProcess, "alive", lambda self: True)
    procs = pool._get("cpu", [0, 1], 1)
    # the set's first device is rank 0, the one process that imports MLflow at its start
    assert calls == [("spawn", 0, True), ("spawn", 1, False), ("hello", 0), ("hello", 1)]
    calls.clear()
    assert pool._get("cpu", [1, 2], 1)[0] is procs[1]  # warm: not started again
    assert calls == [("spawn", 2, False), ("hello", 2)]
    calls.clear()
    with pytest.raises(RuntimeError, match="did not start"):
        pool._get("cpu", [3, 4], 1)
    assert calls == [
        ("spawn", 3, True),
        ("spawn", 4, False),
        ("hello", 3),
        ("kill", 10_003),
        ("kill", 10_004),
    ]
    assert sorted(key[1] for key in pool._procs) == [0, 1, 2]
