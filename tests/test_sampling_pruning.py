"""Tests of the samplers and pruners built from a spec, and of the prune explanations."""

from __future__ import annotations

import importlib.util
from typing import Any

import optuna
import pytest

from hpsearch.exceptions import SpecError
from hpsearch.search._pruning import build_pruner, explain_prune
from hpsearch.search._sampling import build_sampler
from hpsearch.search._space import suggest
from hpsearch.spec import StudySpec

SPACE = {
    "x": {"type": "float", "low": -1.0, "high": 1.0, "step": 0.5},
    "n": {"type": "int", "low": 1, "high": 3},
    "o": {"type": "categorical", "choices": ["a", "b"]},
}


def make_spec(**search: Any) -> StudySpec:
    return StudySpec.from_dict(
        {"name": "sp", "objective": {"model": "cnn", "epochs": 9}, "space": SPACE, "search": search}
    )


def run_a_few(spec: StudySpec, n_trials: int = 4) -> optuna.Study:
    study = optuna.create_study(
        sampler=build_sampler(spec), pruner=build_pruner(spec), direction=spec.direction.value
    )

    def objective(trial: optuna.Trial) -> float:
        values = suggest(trial, spec.space)
        return values["x"] + values["n"] + (values["o"] == "a")

    study.optimize(objective, n_trials=n_trials)
    return study


# ------------------------------------------------------------------------------ samplers


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("tpe", optuna.samplers.TPESampler),
        ("random", optuna.samplers.RandomSampler),
        ("grid", optuna.samplers.GridSampler),
        ("gp", optuna.samplers.GPSampler),
        ("qmc", optuna.samplers.QMCSampler),
        ("nsga2", optuna.samplers.NSGAIISampler),
    ],
)
def test_each_sampler_is_built_and_samples(name: str, cls: type) -> None:
    spec = make_spec(sampler=name)
    assert type(build_sampler(spec)) is cls
    study = run_a_few(spec)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_tpe_defaults_and_option_override() -> None:
    sampler = build_sampler(make_spec(sampler="tpe"))
    assert sampler._multivariate is True
    assert sampler._constant_liar is True
    tuned = build_sampler(
        make_spec(sampler={"name": "tpe", "n_startup_trials": 3, "constant_liar": False})
    )
    assert tuned._n_startup_trials == 3
    assert tuned._constant_liar is False


def test_grid_sampler_covers_the_grid() -> None:
    spec = make_spec(sampler="grid")
    study = run_a_few(spec, n_trials=100)  # the grid sampler stops the study when done
    assert len(study.trials) == 5 * 3 * 2
    assert len({tuple(sorted(t.params.items())) for t in study.trials}) == 30


def first_params(spec: StudySpec, seed_offset: int = 0) -> list[dict[str, Any]]:
    study = optuna.create_study(sampler=build_sampler(spec, seed_offset=seed_offset))
    study.optimize(lambda trial: float(suggest(trial, spec.space)["x"]), n_trials=3)
    return [t.params for t in study.trials]


def test_seed_and_seed_offset() -> None:
    spec = make_spec(sampler="random", seed=3)
    assert first_params(spec) == first_params(spec)
    assert first_params(spec, seed_offset=1) == first_params(make_spec(sampler="random", seed=4))
    assert first_params(spec, seed_offset=1) != first_params(spec)
    unseeded = make_spec(sampler="random", seed=None)
    assert build_sampler(unseeded, seed_offset=5) is not None


def test_cmaes_sampler() -> None:
    if importlib.util.find_spec("cmaes") is None:
        with pytest.raises(SpecError, match=r"search.sampler: .*pip install cmaes"):
            make_spec(sampler="cmaes")
    else:
        assert type(build_sampler(make_spec(sampler="cmaes"))) is optuna.samplers.CmaEsSampler


# ------------------------------------------------------------------------------ pruners


def test_pruner_none() -> None:
    assert type(build_pruner(make_spec(pruner="none"))) is optuna.pruners.NopPruner


def test_pruner_median_defaults_and_override() -> None:
    pruner = build_pruner(make_spec(pruner="median"))
    assert type(pruner) is optuna.pruners.MedianPruner
    assert (pruner._n_startup_trials, pruner._n_warmup_steps) == (2, 1)
    tuned = build_pruner(make_spec(pruner={"name": "median", "n_startup_trials": 7}))
    assert (tuned._n_startup_trials, tuned._n_warmup_steps) == (7, 1)


def test_pruner_percentile() -> None:
    pruner = build_pruner(make_spec(pruner="percentile"))
    assert type(pruner) is optuna.pruners.PercentilePruner
    assert pruner._percentile == 25.0
    tuned = build_pruner(make_spec(pruner={"name": "percentile", "percentile": 40}))
    assert tuned._percentile == 40


def test_pruner_successive_halving() -> None:
    pruner = build_pruner(make_spec(pruner="successive_halving"))
    assert type(pruner) is optuna.pruners.SuccessiveHalvingPruner


def test_pruner_hyperband_uses_the_epochs() -> None:
    pruner = build_pruner(make_spec(pruner="hyperband"))
    assert type(pruner) is optuna.pruners.HyperbandPruner
    assert (pruner._min_resource, pruner._max_resource, pruner._reduction_factor) == (1, 9, 3)
    tuned = build_pruner(make_spec(pruner={"name": "hyperband", "reduction_factor": 2}))
    assert (tuned._max_resource, tuned._reduction_factor) == (9, 2)


# ------------------------------------------------------------------------------ explanations


def study_with(values: list[float], direction: str, *, step: int = 3) -> optuna.Study:
    """A study whose completed trials reported ``values`` at ``step``."""
    study = optuna.create_study(direction=direction)
    for value in values:
        trial = study.ask()
        trial.report(value, step)
        study.tell(trial, value)
    return study


def test_explain_prune_maximize() -> None:
    study = study_with([0.6, 0.7, 0.731, 0.74, 0.8, 0.902], "maximize")
    trial = study.ask()
    trial.report(0.412, 3)
    text = explain_prune(study, trial.number, 3, 0.412, pruner_name="median", metric="val_accuracy")
    assert text == (
        "median pruner at step 3: val_accuracy 0.412 is worse than the median 0.7355 "
        "of 6 other trials at step 3 (best 0.902)"
    )


def test_explain_prune_minimize_with_a_frozen_trial() -> None:
    study = study_with([0.2, 0.4, 0.6], "minimize", step=1)
    trial = study.ask()
    trial.report(0.9, 1)
    frozen = study.get_trials(deepcopy=False)[trial.number]
    text = explain_prune(study, frozen, 1, 0.9, pruner_name="median", metric="val_loss")
    assert text == (
        "median pruner at step 1: val_loss 0.9 is worse than the median 0.4 "
        "of 3 other trials at step 1 (best 0.2)"
    )


def test_explain_prune_better_than_the_median() -> None:
    study = study_with([0.2, 0.4, 0.6], "minimize")
    text = explain_prune(study, 99, 3, 0.1, pruner_name="hyperband")
    assert text == (
        "hyperband pruner at step 3: value 0.1 is better than the median 0.4 "
        "of 3 other trials at step 3 (best 0.2)"
    )


def test_explain_prune_without_other_trials_at_that_step() -> None:
    study = study_with([0.5], "maximize", step=1)
    text = explain_prune(study, 5, 2, 0.3, pruner_name="median", metric="val_accuracy")
    assert text == (
        "median pruner at step 2: val_accuracy 0.3; no other trial has reported step 2 yet"
    )
    assert "no other trial" in explain_prune(optuna.create_study(), 0, 1, 1.0, pruner_name="median")


def test_explain_prune_skips_nan_and_itself() -> None:
    study = study_with([0.5, 0.7], "maximize", step=1)
    diverged = study.ask()
    diverged.report(float("nan"), 1)
    study.tell(diverged, 0.0)  # completed, but its step-1 value is NaN
    trial = study.ask()
    trial.report(0.1, 1)
    text = explain_prune(study, trial.number, 1, 0.1, pruner_name="median")
    assert "of 2 other trials" in text
    assert "median 0.6" in text
    assert "nan" not in text


def test_explain_prune_compares_like_the_pruner() -> None:
    # Median and percentile compare with finished trials only; rung-based pruners also with
    # running ones.
    study = study_with([0.5, 0.7], "maximize", step=1)
    running = study.ask()
    running.report(0.9, 1)
    assert "of 2 other trials" in explain_prune(study, 50, 1, 0.1, pruner_name="median")
    assert "of 3 other trials" in explain_prune(study, 50, 1, 0.1, pruner_name="hyperband")


def test_explanation_agrees_with_the_built_median_pruner() -> None:
    spec = make_spec(pruner="median")
    study = optuna.create_study(direction="maximize", pruner=build_pruner(spec))
    for value in (0.8, 0.9, 0.85):
        trial = study.ask()
        for step in (1, 2):
            trial.report(value, step)
        study.tell(trial, value)
    trial = study.ask()
    trial.report(0.1, 1)
    trial.report(0.1, 2)
    assert trial.should_prune()
    text = explain_prune(study, trial.number, 2, 0.1, pruner_name="median")
    assert "is worse than the median 0.85 of 3 other trials at step 2 (best 0.9)" in text


def _run_pruned_study(pruner, name: str) -> tuple[optuna.Study, list[str], list[str]]:
    """Trials whose values rise with the step; the explanations of pruned and kept trials."""
    import random

    study = optuna.create_study(direction="maximize", pruner=pruner)
    rnd = random.Random(0)
    pruned, kept = [], []
    for _ in range(30):
        trial = study.ask()
        quality = rnd.random()
        for step in range(1, 10):
            value = quality * step / 9
            trial.report(value, step)
            rungs_before = len(study.trials[trial.number].system_attrs)
            prune = trial.should_prune()
            text = explain_prune(study, trial.number, step, value, pruner_name=name)
            if prune:
                pruned.append(text)
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                break
            if len(study.trials[trial.number].system_attrs) > rungs_before:
                kept.append(text)  # it reached a rung at this step and was let through
        else:
            study.tell(trial, quality)
    return study, pruned, kept


@pytest.mark.parametrize(
    ("name", "make"),
    [
        (
            "successive_halving",
            lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
        ),
        (
            "hyperband",
            lambda: optuna.pruners.HyperbandPruner(
                min_resource=1, max_resource=9, reduction_factor=3
            ),
        ),
    ],
)
def test_rung_pruners_are_explained_by_their_rung(name, make) -> None:
    _, pruned, kept = _run_pruned_study(make(), name)
    assert pruned and kept
    # A pruned trial is outside its rung's top 1/eta; one the pruner let through is inside.
    assert all("is not in the top 1/3 of the" in text and "(cut-off" in text for text in pruned)
    assert all("is in the top 1/3" in text for text in kept)
    assert all("median" not in text for text in pruned)
    if name == "hyperband":
        assert all("(bracket " in text for text in pruned)


def test_percentile_pruner_is_explained_by_its_percentile() -> None:
    pruner = optuna.pruners.PercentilePruner(25.0, n_startup_trials=2, n_warmup_steps=0)
    _, pruned, _ = _run_pruned_study(pruner, "percentile")
    assert pruned
    # Maximising, the 25 % pruner keeps what is above the 75th percentile.
    assert all("is worse than the 75th percentile" in text for text in pruned)


def test_the_coordinators_joint_sample_is_what_the_workers_trial_takes(tmp_path) -> None:
    """No declared space: the coordinator draws the joint (relative) sample of the
    parameters the finished trials share when it asks, and the worker's trial takes it, its
    own sampler drawing nothing. A declared parameter is asked for, so it is not in it."""
    from hpsearch.coordinator import Coordinator
    from hpsearch.testing import user_spec
    from tests.conftest import local_trials

    raw = user_spec("joint", "hpsearch.testing.objectives:trivial", n_trials=10)
    sampler = optuna.samplers.TPESampler(seed=1, multivariate=True, n_startup_trials=3)
    study, send = local_trials(tmp_path, StudySpec.from_dict(raw), sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", -10, 10) + t.suggest_float("y", -10, 10), 4)
    asked = study.ask()
    relative = Coordinator._relative(asked)
    assert relative is not None and sorted(relative) == ["x", "y"]
    drawn = {name: value for name, (_, value) in relative.items()}
    outcome = send(asked, relative=relative)
    assert outcome.state == "COMPLETE"
    assert study.trials[asked.number].params == drawn, "the worker suggested the drawn values"

    declared = study.ask({"x": optuna.distributions.FloatDistribution(-10, 10)})
    assert sorted(Coordinator._relative(declared) or {}) == ["y"]

    class Fails(optuna.samplers.RandomSampler):
        def sample_relative(self, *args, **kwargs):
            raise RuntimeError("no joint sample today")

    study.sampler = Fails()
    assert Coordinator._relative(study.ask()) is None, "a failing draw is left to the worker"


@pytest.mark.parametrize("via", ["proxy", "direct"])
def test_a_parameter_the_study_refuses_fails_the_objective_at_its_suggest(tmp_path, via) -> None:
    """A parameter the worker samples itself is written before its suggest returns: one the
    study refuses (``x`` is a float in the study, suggested as an int) fails the objective
    there, naming the parameter and the study's reason, before it goes on to train."""
    from hpsearch.search._optuna import storage_of
    from hpsearch.storage import StorageProxy
    from hpsearch.testing import user_spec
    from tests.conftest import local_trials

    raw = user_spec("refused", "hpsearch.testing.objectives:trivial", n_trials=2)
    study, send = local_trials(tmp_path, StudySpec.from_dict(raw))
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), 1)
    went_on: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        trial.suggest_int("x", 0, 3)
        went_on.append(trial.number)
        return 0.0

    with StorageProxy(storage_of(study)) as proxy:
        address = proxy.address if via == "proxy" else None
        outcome = send(study.ask(), proxy=address, objective=objective)
    assert outcome.state == "FAIL" and not went_on
    assert outcome.error_type == "ValueError"
    assert (outcome.reason or "").startswith("ValueError: parameter 'x': Cannot set different")
