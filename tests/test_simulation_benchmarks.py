"""Tests of the simulated cluster's benchmarks: LCBench's surrogate and the synthetic one."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from hpsearch.data.surrogates import _lcbench
from hpsearch.data.surrogates._lcbench import (
    DATA,
    DIRECTIONS,
    MIN_EPOCH_S,
    OUTPUTS,
    PARAMS,
    _random_configs,
)
from hpsearch.exceptions import HpsearchError, MissingExtra
from hpsearch.search._space import to_distributions
from hpsearch.simulation import BENCHMARKS, Curve, LCBench, Synthetic, benchmark
from hpsearch.spec import ParamSpec

GOLDEN = Path(__file__).with_name("data") / "lcbench_yahpo.json"


def _as_spec(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    adapter: TypeAdapter[Any] = TypeAdapter(ParamSpec)
    return {name: adapter.validate_python(param) for name, param in space.items()}


# --- the registry -----------------------------------------------------------------------------


def test_unknown_benchmark_names_the_known_ones() -> None:
    with pytest.raises(ValueError) as err:
        benchmark("nas-bench")
    assert str(err.value) == "unknown benchmark 'nas-bench': one of lcbench, synthetic"
    assert BENCHMARKS == ("lcbench", "synthetic")


# --- lcbench ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lcbench() -> LCBench:
    pytest.importorskip("onnxruntime")
    return LCBench()


def test_lcbench_space_is_config_space_json(lcbench: LCBench) -> None:
    raw = json.loads((DATA / "config_space.json").read_text())["hyperparameters"]
    expected = {
        hp["name"]: {
            "type": {"uniform_int": "int", "uniform_float": "float"}[hp["type"]],
            "low": hp["lower"],
            "high": hp["upper"],
            "log": hp["log"],
        }
        for hp in raw
        if hp["name"] not in ("OpenML_task_id", "epoch")
    }
    space = lcbench.space()
    assert space == expected
    assert set(space) == {
        "batch_size",
        "learning_rate",
        "momentum",
        "weight_decay",
        "num_layers",
        "max_units",
        "max_dropout",
    }
    assert space["batch_size"] == {"type": "int", "low": 16, "high": 512, "log": True}
    # a study file's space: valid for the spec and Optuna
    assert list(to_distributions(_as_spec(space))) == list(space)
    instances = next(hp for hp in raw if hp["name"] == "OpenML_task_id")["choices"]
    assert lcbench.instances == tuple(instances) and len(instances) == 34
    assert (lcbench.name, lcbench.metric, lcbench.direction, lcbench.max_epochs) == (
        "lcbench",
        "val_accuracy",
        "maximize",
        52,
    )


def test_lcbench_curve_shape(lcbench: LCBench) -> None:
    for row in _random_configs(20, seed=5):
        params = dict(zip(PARAMS, row, strict=True))
        curve = lcbench.curve(params, "167184", 52)
        assert isinstance(curve, Curve) and len(curve) == 52
        assert set(curve.metrics) == set(OUTPUTS)
        assert all(len(values) == 52 for values in curve.metrics.values())
        assert curve.values == curve.metrics["val_accuracy"]
        assert min(curve.epoch_s) >= MIN_EPOCH_S
        # epoch_s adds up to the surrogate's cumulative time (its running maximum)
        assert curve.total_s == pytest.approx(max(curve.metrics["time"]), rel=1e-6, abs=1.0)
        assert all(0 <= v <= 100 for v in curve.values)
    short = lcbench.curve(lcbench.default(), "3945", 10)
    full = lcbench.curve(lcbench.default(), "3945", 52)
    assert len(short) == 10
    np.testing.assert_allclose(short.values, full.values[:10], rtol=1e-6)


def test_lcbench_equals_yahpo_gym_recorded(lcbench: LCBench) -> None:
    """yahpo-gym 1.0.2's own values (benchmarks/lcbench.py check --golden) on 3 instances."""
    golden = json.loads(GOLDEN.read_text())
    assert len(golden["curves"]) == 18
    for recorded in golden["curves"]:
        curve = lcbench.curve(recorded["params"], recorded["instance"], 52)
        for name, theirs in zip(golden["outputs"], recorded["outputs"], strict=True):
            np.testing.assert_allclose(curve.metrics[name], theirs, rtol=1e-5, err_msg=name)


def test_lcbench_equals_yahpo_gym_live(
    lcbench: LCBench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    yahpo_gym = pytest.importorskip("yahpo_gym")
    from yahpo_gym import local_config

    shutil.copytree(DATA, tmp_path / "lcbench")
    monkeypatch.setattr(local_config, "settings_path", tmp_path / "yahpo_gym.yaml")
    monkeypatch.setattr(local_config, "_config", None)
    local_config.init_config(data_path=str(tmp_path))
    space = lcbench.space()
    for instance in ("3945", "7593", "189909"):
        yahpo = yahpo_gym.BenchmarkSet("lcbench", instance=instance, multithread=False)
        for row in _random_configs(10, seed=11):
            params = {
                name: int(v) if space[name]["type"] == "int" else float(v)
                for name, v in zip(PARAMS, row, strict=True)
            }
            asked = [{**params, "OpenML_task_id": instance, "epoch": e} for e in range(1, 53)]
            theirs = yahpo.objective_function(asked)
            curve = lcbench.curve(params, instance, 52)
            for name in OUTPUTS:
                np.testing.assert_allclose(
                    curve.metrics[name], [r[name] for r in theirs], rtol=1e-5, err_msg=name
                )


def test_lcbench_is_deterministic_and_cached(lcbench: LCBench) -> None:
    params = {**lcbench.default(), "learning_rate": 0.02}
    _lcbench._evaluate.cache_clear()
    first = lcbench.curve(params, "126025", 30)
    assert _lcbench._evaluate.cache_info().misses == 1
    first.metrics["val_accuracy"] = ()  # a caller's change stays in its copy
    again = lcbench.curve({**params, "batch_size": 91.0}, "126025", 30)  # the same key
    assert _lcbench._evaluate.cache_info().hits == 1
    assert len(again.metrics["val_accuracy"]) == 30
    _lcbench._evaluate.cache_clear()
    fresh = lcbench.curve(params, "126025", 30)
    assert fresh == again
    assert _lcbench._evaluate.cache_info().misses == 1


def test_lcbench_best_is_a_reference_optimum(lcbench: LCBench) -> None:
    record = json.loads((DATA / "reference_best.json").read_text())
    assert (record["n"], record["seed"], record["epoch"]) == (50_000, 0, 52)
    assert set(record["best"]) == set(DIRECTIONS)
    for instance in lcbench.instances:
        final = lcbench.curve(lcbench.default(), instance, 52).values[-1]
        assert final <= lcbench.best(instance) <= 100
    low = LCBench(metric="val_cross_entropy")
    assert low.direction == "minimize"
    assert 0 < low.best("3945") <= low.curve(low.default(), "3945", 52).values[-1]
    assert lcbench.best("3945", metric="val_cross_entropy") == low.best("3945")


def test_lcbench_rejects_bad_requests(lcbench: LCBench) -> None:
    params = lcbench.default()
    with pytest.raises(ValueError, match="no instance '1'"):
        lcbench.curve(params, "1", 52)
    with pytest.raises(ValueError, match=r"epochs must be in 1\.\.52, got 53"):
        lcbench.curve(params, "3945", 53)
    with pytest.raises(ValueError, match=r"unknown \['lr'\], missing \['learning_rate'\]"):
        renamed = {k: v for k, v in params.items() if k != "learning_rate"}
        lcbench.curve({**renamed, "lr": 1e-3}, "3945", 5)
    with pytest.raises(ValueError, match="batch_size = 8 is outside"):
        lcbench.curve({**params, "batch_size": 8}, "3945", 5)
    # config_space.json's bounds are 1e-4 and 0.1 up to rounding: the round numbers are in
    lcbench.curve({**params, "learning_rate": 1e-4}, "3945", 2)
    lcbench.curve({**params, "learning_rate": 0.1}, "3945", 2)
    with pytest.raises(ValueError, match="no metric 'time'"):
        LCBench(metric="time")


def test_lcbench_without_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime: ImportError
    message = "the lcbench benchmark needs onnxruntime: pip install 'hpsearch[sim]'"
    with pytest.raises(MissingExtra) as err:
        benchmark("lcbench")
    assert str(err.value) == message
    assert isinstance(err.value, ImportError) and isinstance(err.value, HpsearchError)
    assert (err.value.name, err.value.extra) == ("onnxruntime", "sim")
    # and where the session is made (a benchmark made before onnxruntime went away)
    monkeypatch.setattr(_lcbench, "_session", None)
    with pytest.raises(MissingExtra, match=r"^the lcbench benchmark needs onnxruntime: "):
        _lcbench._onnx_session()


# --- synthetic --------------------------------------------------------------------------------


def test_synthetic_space_and_curve() -> None:
    bench = benchmark("synthetic")
    assert isinstance(bench, Synthetic)
    assert (bench.name, bench.metric, bench.direction, bench.instances) == (
        "synthetic",
        "val_accuracy",
        "maximize",
        ("a", "b"),
    )
    assert list(to_distributions(_as_spec(bench.space()))) == ["x", "lr", "width"]
    params = {"x": 0.1, "lr": 1e-3, "width": 100}
    curve = bench.curve(params, "a", bench.max_epochs)
    assert len(curve) == bench.max_epochs and min(curve.epoch_s) > 0
    assert list(curve.values) == sorted(curve.values)  # rises
    assert curve.metrics["val_loss"] == tuple(1 - v for v in curve.values)
    assert bench.curve(params, "a", 7).values == curve.values[:7]
    assert bench.curve(params, "a", 7) == bench.curve(dict(params), "a", 7)  # deterministic
    # a wider network is slower
    assert bench.curve({**params, "width": 256}, "a", 1).epoch_s > curve.epoch_s[:1]
    with pytest.raises(ValueError, match="no instance 'c'"):
        bench.curve(params, "c", 3)
    with pytest.raises(ValueError, match=r"width = 8 is outside \[16, 256\]"):
        bench.curve({**params, "width": 8}, "a", 3)


def test_synthetic_best_is_the_true_maximum() -> None:
    bench = Synthetic()
    xs = np.linspace(0, 1, 21)
    lrs = np.logspace(-4, -1, 31)
    widths = (16, 23, 45, 64, 128, 200, 256)
    for instance in bench.instances:
        finals = [
            bench.curve({"x": x, "lr": lr, "width": w}, instance, bench.max_epochs).values[-1]
            for x in xs
            for lr in lrs
            for w in widths
        ]
        assert max(finals) <= bench.best(instance) + 1e-12
        assert max(finals) > bench.best(instance) - 0.01  # the grid comes close
        optimum = bench.optimum(instance)
        reached = bench.curve(optimum, instance, bench.max_epochs)
        assert reached.values[-1] == pytest.approx(bench.best(instance), abs=1e-9)
        assert max(reached.values) == reached.values[-1]  # no earlier epoch is better
    assert bench.optimum("a") != bench.optimum("b")
    assert bench.best("a", metric="val_loss") == 0.0


def test_synthetic_curves_cross() -> None:
    """Early leaders are not the final winners: a fast learning rate leads, then loses."""
    bench = Synthetic()
    fast = bench.curve({"x": 0.3, "lr": 0.1, "width": 16}, "a", bench.max_epochs).values
    best = bench.curve(bench.optimum("a"), "a", bench.max_epochs).values
    assert fast[4] > best[4] and fast[-1] < best[-1]
    crossing = next(e for e in range(bench.max_epochs) if best[e] > fast[e])
    assert 5 < crossing < bench.max_epochs - 5
    assert math.isclose(best[-1], 1.0)
