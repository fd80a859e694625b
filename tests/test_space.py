"""Tests of the spec search space as Optuna distributions."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hpsearch.exceptions import SpecError
from hpsearch.search._space import grid_search_space, suggest, to_distributions
from hpsearch.spec import CategoricalParam, FloatParam, IntParam, StudySpec

SPACE: dict[str, Any] = {
    "lr": FloatParam(type="float", low=1e-4, high=1e-1, log=True),
    "dropout": FloatParam(type="float", low=0.0, high=0.5),
    "momentum": FloatParam(type="float", low=0.0, high=0.9, step=0.3),
    "channels": IntParam(type="int", low=8, high=64, step=8),
    "hidden": IntParam(type="int", low=16, high=256, log=True),
    "optimizer": CategoricalParam(type="categorical", choices=["adam", "sgd"]),
    "mixed": CategoricalParam(type="categorical", choices=[None, True, 3, 0.5, "x"]),
}


def test_to_distributions() -> None:
    distributions = to_distributions(SPACE)
    assert list(distributions) == list(SPACE)
    assert distributions["lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    assert distributions["dropout"] == FloatDistribution(0.0, 0.5)
    assert distributions["momentum"] == FloatDistribution(0.0, 0.9, step=0.3)
    assert distributions["channels"] == IntDistribution(8, 64, step=8)
    assert distributions["hidden"] == IntDistribution(16, 256, log=True)
    assert distributions["optimizer"] == CategoricalDistribution(["adam", "sgd"])
    assert distributions["mixed"] == CategoricalDistribution([None, True, 3, 0.5, "x"])


def test_suggest_returns_the_asked_parameters() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(5):
        trial = study.ask(fixed_distributions=to_distributions(SPACE))
        asked = dict(trial.params)
        assert suggest(trial, SPACE) == asked
        assert trial.distributions == to_distributions(SPACE)
        study.tell(trial, 0.0)


def test_suggest_samples_inside_the_declared_space() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))

    def objective(trial: optuna.Trial) -> float:
        values = suggest(trial, SPACE)
        assert 1e-4 <= values["lr"] <= 1e-1
        assert values["channels"] % 8 == 0
        assert any(values["momentum"] == pytest.approx(v) for v in (0.0, 0.3, 0.6, 0.9))
        assert values["optimizer"] in ("adam", "sgd")
        return 0.0

    study.optimize(objective, n_trials=10)
    assert study.trials[0].distributions == to_distributions(SPACE)


def test_spec_space_converts() -> None:
    spec = StudySpec.from_dict(
        {
            "name": "s",
            "objective": {"model": "cnn"},
            "space": {"lr": {"type": "float", "low": 1.0e-4, "high": 3.0e-2, "log": True}},
        }
    )
    assert to_distributions(spec.space) == {"lr": FloatDistribution(1e-4, 3e-2, log=True)}


def test_grid_search_space_expands_ranges() -> None:
    space = {k: v for k, v in SPACE.items() if k not in ("lr", "dropout")}
    grid = grid_search_space(space)
    assert grid["momentum"] == [0.0, 0.3, 0.6, 0.9]
    assert grid["channels"] == [8, 16, 24, 32, 40, 48, 56, 64]
    assert grid["hidden"] == list(range(16, 257))
    assert grid["optimizer"] == ["adam", "sgd"]
    assert grid["mixed"] == [None, True, 3, 0.5, "x"]


def test_grid_float_steps_are_exact_and_stay_in_range() -> None:
    grid = grid_search_space({"x": FloatParam(type="float", low=0.1, high=1.0, step=0.1)})
    assert grid["x"] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    # A step that does not divide the range stops at the last value below high.
    assert grid_search_space({"y": IntParam(type="int", low=1, high=8, step=3)})["y"] == [1, 4, 7]
    uneven = grid_search_space({"z": FloatParam(type="float", low=0.0, high=1.0, step=0.4)})
    assert uneven["z"] == [0.0, 0.4, 0.8]


def test_grid_needs_a_float_step() -> None:
    with pytest.raises(SpecError, match=r"space.lr: the grid sampler needs"):
        grid_search_space({"lr": SPACE["lr"]})


def test_grid_values_are_accepted_by_the_distributions() -> None:
    space = {"momentum": SPACE["momentum"], "channels": SPACE["channels"]}
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(grid_search_space(space)))
    seen = set()

    def objective(trial: optuna.Trial) -> float:
        values = suggest(trial, space)
        seen.add((values["momentum"], values["channels"]))
        return 0.0

    # The grid sampler stops the study itself once every point was tried.
    study.optimize(objective, n_trials=100)
    assert len(seen) == 32
    assert len(study.trials) == 32
