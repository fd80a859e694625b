"""The simulated cluster: the real coordinator and schedulers in virtual time, on surrogate
benchmarks. Determinism, faults (lost workers, a coordinator restart), asha's decisions by
hand, and the study file's errors."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.data.surrogates._benchmarks import Curve, benchmark
from hpsearch.exceptions import SpecError
from hpsearch.simulation import TIMELINE, simulate
from hpsearch.spec import StudySpec
from hpsearch.storage import open_storage


def _spec(**overrides: Any) -> StudySpec:
    data: dict[str, Any] = {
        "name": "sim",
        "objective": {"model": "synthetic", "epochs": 27},
        "search": {"n_trials": 120, "sampler": "random", "scheduler": "asha", "seed": 3},
        "cluster": {"backend": "simulated", "simulated": {"workers": 8}},
    }
    for key, value in overrides.items():
        section, _, field = key.partition("__")
        if field == "simulated":
            data["cluster"]["simulated"].update(value)
        elif field:
            data[section][field] = value
        else:
            data[section] = value
    return StudySpec.from_dict(data)


def _steps_once(study: optuna.Study, spec: StudySpec, tmp_path) -> None:
    """Every trial ended (failed only where its worker was lost too often), and each reported
    exactly the benchmark's values at epochs 1..n."""
    bench = benchmark(spec.objective.model)
    for trial in study.get_trials(deepcopy=False):
        lost = str(trial.user_attrs.get("hpsearch.fail_reason", "")).startswith("worker lost")
        ended = trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
        assert ended or (trial.state == TrialState.FAIL and lost), trial.number
        steps = sorted(trial.intermediate_values)
        assert steps == list(range(1, len(steps) + 1)), f"trial {trial.number}: {steps}"
        curve = bench.curve(trial.params, bench.instances[0], spec.objective.epochs)
        assert [trial.intermediate_values[s] for s in steps] == pytest.approx(
            list(curve.values[: len(steps)])
        )
        if trial.state == TrialState.COMPLETE:
            assert steps[-1] == spec.objective.epochs
            assert trial.value == pytest.approx(curve.values[-1])


def test_the_same_file_and_seed_give_the_same_trace(tmp_path):
    spec = _spec(cluster__simulated={"worker_mtbf": "3m", "restart": "20s", "seed": 5})
    first = simulate(spec, study_dir=tmp_path / "a")
    second = simulate(spec, study_dir=tmp_path / "b")
    assert first.worker_losses > 0, "the trace includes lost workers"
    assert first.timeline() == second.timeline()
    other = simulate(
        _spec(cluster__simulated={"worker_mtbf": "3m", "restart": "20s", "seed": 6}),
        study_dir=tmp_path / "c",
    )
    assert other.timeline() != first.timeline(), "the seed decides the losses"


def test_lost_workers_and_a_coordinator_restart_lose_no_step(tmp_path):
    spec = _spec(
        cluster__simulated={
            "worker_mtbf": "2m",
            "restart": "10s",
            "restart_coordinator_at": ["30s", "80s"],
        },
        objective__checkpoint_interval=5,
    )
    sim = simulate(spec, study_dir=tmp_path)
    assert sim.worker_losses >= 5 and sim.coordinator_restarts == 2
    trials = sim.study.get_trials(deepcopy=False)
    assert len(trials) == spec.search.n_trials
    _steps_once(sim.study, spec, tmp_path)
    lost = [s for s in sim.segments if s["state"] == "LOST"]
    assert lost, "some trials were on a lost worker"
    # A trial that lost its worker started again, as a new attempt, from a checkpoint.
    # (A trial whose worker was lost too often ends FAIL, with the reason: no new attempt.)
    failed = {t.number for t in trials if t.state == TrialState.FAIL}
    again = {(s["trial"], s["attempt"]) for s in sim.segments}
    assert all(
        (s["trial"], s["attempt"] + 1) in again
        for s in lost
        if s["to_epoch"] < 27 and s["trial"] not in failed
    )


@dataclass(frozen=True)
class _Table:
    """A benchmark of fixed values: the trial with x = v reports v at epoch 1 and the
    scheduler tests' hand-set value at epoch 3 (minimize)."""

    name = "table"
    metric = "val_accuracy"  # as the spec's surrogate says; minimized here
    direction = "minimize"
    max_epochs = 9
    instances = ("t",)
    metrics = ("val_accuracy",)

    def space(self) -> dict[str, Any]:
        return {"x": {"type": "float", "low": 0.0, "high": 1.0}}

    def curve(self, params: dict[str, Any], instance: str, epochs: int) -> Curve:
        x = params["x"]
        third = {0.4: 0.35, 0.3: 0.25, 0.2: 0.15}.get(round(x, 6), 0.5)
        values = (x, x, third) + (third / 2,) * (epochs - 3)
        return Curve(values[:epochs], (1.0,) * epochs, {"val_accuracy": values[:epochs]})

    def best(self, instance: str) -> float:
        return 0.0


def test_asha_in_simulation_promotes_as_computed_by_hand(tmp_path):
    """The scheduler tests' hand-computed schedule (eta 3, epochs 1 and 3, minimize), on one
    simulated worker: each trial is asked only when no paused one can be promoted."""
    spec = _spec(
        objective={"model": "synthetic", "epochs": 9, "direction": "minimize"},
        search={"n_trials": 7, "sampler": "random", "scheduler": "asha"},
        cluster__simulated={"workers": 1},
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
    )
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name="sim", storage=storage)
    for x in [0.5, 0.4, 0.6, 0.3, 0.8, 0.9, 0.2]:
        study.enqueue_trial({"x": x})
    sim = simulate(spec, study_dir=tmp_path, storage=storage, bench=_Table())
    runs = [(s["trial"], s["from_epoch"], s["to_epoch"]) for s in sim.segments]
    assert runs == [
        (0, 0, 1),
        (1, 0, 1),
        (2, 0, 1),
        (1, 1, 3),  # rung 0 holds 3: its top 1 (trial 1) goes on
        (3, 0, 1),
        (3, 1, 3),  # 4 // 3 = 1: trial 3 is the top
        (4, 0, 1),
        (5, 0, 1),
        (6, 0, 1),
        (6, 1, 3),  # the top 2 of 7 are 6 and 3
        (6, 3, 9),  # rung 1 holds 3: its top 1 (trial 6) runs to the last epoch
    ]
    states = {t.number: t.state for t in sim.study.get_trials(deepcopy=False)}
    assert states == {n: TrialState.PRUNED for n in range(6)} | {6: TrialState.COMPLETE}


def test_a_pruner_in_simulation_records_its_reason(tmp_path):
    spec = _spec(search={"n_trials": 40, "sampler": "random", "pruner": "median", "seed": 1})
    sim = simulate(spec, study_dir=tmp_path)
    pruned = [t for t in sim.study.get_trials(deepcopy=False) if t.state == TrialState.PRUNED]
    assert pruned
    assert all("median" in t.user_attrs["hpsearch.prune_reason"] for t in pruned)
    _steps_once(sim.study, spec, tmp_path)


def test_hpsearch_run_on_the_simulated_cluster(tmp_path):
    study_file = tmp_path / "sim.yaml"
    study_file.write_text(
        "name: sim-cli\n"
        "objective: {model: synthetic, epochs: 9}\n"
        "search: {n_trials: 30, sampler: random, scheduler: asha, seed: 0}\n"
        "cluster: {backend: simulated, simulated: {workers: 4}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "hpsearch.cli", "run", str(study_file), "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "simulated" in out.stdout and "device-hours" in out.stdout
    folder = tmp_path / "sim-cli"
    lines = [json.loads(line) for line in (folder / TIMELINE).read_text().splitlines()]
    assert {line["trial"] for line in lines} == set(range(30))
    # The study is an ordinary one in the run folder: the views read it.
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpsearch.cli",
            "status",
            str(study_file),
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert status.returncode == 0 and "30/30 ended" in status.stdout, status.stdout


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"cluster": {"backend": "simulated", "simulated": {"workers": 0}}}, "workers", ">= 1"),
        (
            {"cluster": {"backend": "simulated", "simulated": {"worker_mtbf": "often"}}},
            "cluster.simulated.worker_mtbf",
            "",
        ),
        (
            {"cluster": {"backend": "simulated", "simulated": {"nodes": 3}}},
            "cluster.simulated.nodes",
            "",
        ),
        ({"cluster": {"backend": "local"}}, "objective.model", "simulated"),
        (
            {
                "objective": {"model": "cnn"},
                "space": {"lr": {"type": "float", "low": 0.1, "high": 1}},
            },
            "cluster.backend",
            "synthetic",
        ),
        ({"objective": {"model": "synthetic", "epochs": 500}}, "objective.epochs", "at most"),
        (
            {
                "objective": {
                    "model": "synthetic",
                    "dataset": {"name": "synthetic", "instance": "zz"},
                }
            },
            "objective.dataset",
            "instance",
        ),
        ({"objective": {"model": "synthetic", "metric": "accuracy"}}, "objective.metric", ""),
    ],
)
def test_a_bad_simulation_is_a_one_line_error(change, field, says):
    data: dict[str, Any] = {
        "name": "bad",
        "objective": {"model": "synthetic"},
        "cluster": {"backend": "simulated"},
        **change,
    }
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(data)
    line = next(p for p in info.value.problems if field in p)
    assert says in line and "\n" not in line


def test_lcbench_without_onnxruntime_is_a_one_line_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(
            {"name": "lc", "objective": {"model": "lcbench"}, "cluster": {"backend": "simulated"}}
        )
    assert info.value.problems == [
        "<study>: objective.model: the lcbench benchmark needs onnxruntime: "
        "pip install 'hpsearch[sim]'"
    ]


def test_lcbench_study_runs_on_its_own_space(tmp_path):
    spec = StudySpec.from_dict(
        {
            "name": "lc",
            "objective": {"model": "lcbench", "dataset": {"name": "lcbench", "instance": "7593"}},
            "search": {"n_trials": 60, "sampler": "random", "scheduler": "asha", "seed": 0},
            "cluster": {"backend": "simulated", "simulated": {"workers": 16}},
        }
    )
    assert sorted(spec.space) == sorted(benchmark("lcbench").space())
    assert spec.metric == "val_accuracy" and spec.direction.value == "maximize"
    sim = simulate(spec, study_dir=tmp_path)
    assert len(sim.study.get_trials(deepcopy=False)) == 60
    assert sim.simulated_s > 0 and sim.device_hours > 0
    best = sim.study.best_value
    assert 0 < best <= benchmark("lcbench").best("7593")


def test_a_study_that_ran_replays_with_the_same_decisions(tmp_path):
    """A study's own records as a benchmark: the same sampler and seed ask the same trials,
    and on one worker asha decides the same from the same values."""
    from hpsearch import Study

    spec = _spec(
        search={"n_trials": 25, "sampler": "random", "scheduler": "asha", "seed": 4},
        cluster__simulated={"workers": 1},
    )
    Study(spec, run_dir=tmp_path).run(progress=False)
    data = spec.to_dict()
    data["name"] = "again"
    data["objective"] = {
        "model": "replay",
        "dataset": {"name": "replay", "study": str(tmp_path / "sim")},
        "epochs": 27,
    }
    data.pop("space")  # the recorded study's
    replay = StudySpec.from_dict(data)
    assert replay.space == spec.space and replay.metric == "val_accuracy"
    sim = simulate(replay, study_dir=tmp_path / "again")
    from hpsearch.storage import open_storage

    recorded = optuna.load_study(
        study_name="sim", storage=open_storage(f"journal://{tmp_path / 'sim' / 'optuna.journal'}")
    ).get_trials(deepcopy=False)

    def ended(trials):
        return {t.number: (t.params, t.state, dict(t.intermediate_values)) for t in trials}

    assert ended(sim.study.get_trials(deepcopy=False)) == ended(recorded)


def test_replay_of_a_folder_that_is_no_study_is_one_line(tmp_path):
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(
            {
                "name": "r",
                "objective": {"model": "replay", "dataset": {"name": "replay", "study": "nope"}},
                "cluster": {"backend": "simulated"},
            }
        )
    (line,) = info.value.problems
    assert line.startswith("<study>: objective.dataset: cannot replay nope:"), line


def test_hpsearch_simulate_compares_methods_and_draws_them(tmp_path):
    study_file = tmp_path / "grid.yaml"
    study_file.write_text(
        "name: grid\n"
        "objective: {model: synthetic, epochs: 9}\n"
        "search: {n_trials: 20, sampler: random}\n"
        "cluster: {backend: simulated}\n"
    )
    out = subprocess.run(
        [
            *(sys.executable, "-m", "hpsearch.cli", "simulate", str(study_file)),
            *("--workers", "2,8", "--seeds", "3", "--methods", "random,asha,tpe+median"),
            *("--out", str(tmp_path / "plots")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "│" in line and "workers" not in line]
    assert len(rows) == 6, out.stdout  # 2 worker counts x 3 methods
    for n in (2, 8):
        assert (tmp_path / "plots" / f"grid-{n}-workers.png").stat().st_size > 10_000
    bad = subprocess.run(
        [sys.executable, "-m", "hpsearch.cli", "simulate", str(study_file), "--methods", "sgd"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "unknown method 'sgd'" in bad.stderr


def test_a_simulated_study_can_be_recorded_in_mlflow(tmp_path):
    from hpsearch import Study

    from .conftest import mlflow_runs

    spec = _spec(
        search={"n_trials": 12, "sampler": "random", "scheduler": "asha", "seed": 2},
        cluster__simulated={"tracking": True},
    )
    result = Study(spec, run_dir=tmp_path).run(progress=False)
    client, runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "sim")
    (parent,) = [r for r in runs if r.data.tags.get("hpsearch.role") == "study"]
    assert parent.info.run_id == result.parent_run_id
    assert parent.data.tags["hpsearch.simulated"] == "true"
    trials = {int(r.data.tags["hpsearch.trial_number"]): r for r in runs if r is not parent}
    study = optuna.load_study(
        study_name="sim",
        storage=open_storage(f"journal://{tmp_path / 'sim' / 'optuna.journal'}"),
    )
    assert sorted(trials) == list(range(12))
    for trial in study.trials:
        run = trials[trial.number]
        assert run.data.tags["hpsearch.state"] == trial.state.name
        assert run.info.status == "FINISHED" and run.info.end_time >= run.info.start_time
        history = client.get_metric_history(run.info.run_id, "val_accuracy")
        assert {m.step: m.value for m in history} == pytest.approx(trial.intermediate_values)
        if trial.state == TrialState.PRUNED:
            assert "asha" in run.data.tags["hpsearch.prune_reason"]
    # Run again: the records are replaced, not added to.
    Study(spec, run_dir=tmp_path).run(progress=False)
    _, again = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "sim")
    assert len(again) == 13
