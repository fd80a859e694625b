"""hpsearch reads a few private Optuna attributes, all in ``hpsearch.search._optuna``: each is
pinned to the Optuna versions it was checked on and checked against Optuna's own behaviour."""

from __future__ import annotations

import optuna

from hpsearch.search import _optuna


def test_optuna_is_a_checked_version() -> None:
    major_minor = ".".join(optuna.__version__.split(".")[:2])
    assert major_minor in _optuna.CHECKED_ON, (
        f"hpsearch.search._optuna was checked on Optuna {', '.join(_optuna.CHECKED_ON)}, "
        f"not {optuna.__version__}: check each function there, then add the version"
    )


def test_storage_and_ids_are_the_ones_the_study_uses(tmp_path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    study = optuna.create_study(study_name="s", storage=storage)
    # A study built on an RDB storage wraps it in a cache: writes must go through the wrap.
    wrapped = _optuna.storage_of(study)
    assert wrapped is storage or wrapped._backend is storage
    assert _optuna.study_id_of(study) == storage.get_study_id_from_name("s")
    study.ask()
    trial = study.ask()
    trial_id = _optuna.trial_id_of(trial)
    assert trial_id == storage.get_trial_id_from_study_id_trial_number(
        _optuna.study_id_of(study), trial.number
    )
    assert _optuna.trial_id_of(study.trials[1]) == trial_id
    _optuna.storage_of(study).set_trial_user_attr(trial_id, "k", 1)
    assert study.trials[1].user_attrs == {"k": 1}


def test_the_cached_trial_is_what_report_and_should_prune_read() -> None:
    study = optuna.create_study()
    trial = study.ask()
    trial.report(0.5, 3)
    assert _optuna.cached_trial(trial).intermediate_values == {3: 0.5}
    assert _optuna.cached_trial(trial).number == trial.number


def test_pruner_settings() -> None:
    sha = optuna.pruners.SuccessiveHalvingPruner(reduction_factor=4)
    assert _optuna.reduction_factor(sha) == 4
    hyperband = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=9, reduction_factor=3)
    assert _optuna.reduction_factor(hyperband) == 3
    study = optuna.create_study(pruner=hyperband)
    for _ in range(6):
        trial = study.ask()
        trial.report(1.0, 1)
        trial.should_prune()  # places the trial in its bracket
        study.tell(trial, 1.0)
    for bracket in range(3):
        members = {t.number for t in hyperband._create_bracket_study(study, bracket).get_trials()}
        ours = {
            t.number
            for t in study.trials
            if _optuna.hyperband_bracket(hyperband, study, t) == bracket
        }
        assert members == ours
    assert _optuna.percentile(optuna.pruners.PercentilePruner(10.0)) == 10.0


def test_a_relative_sample_given_to_a_trial_is_what_its_suggests_take(tmp_path) -> None:
    """A relative sample drawn by one process's sampler, given to the same trial opened in
    another study object: its suggests take the given values, its sampler draws nothing."""
    from optuna.distributions import FloatDistribution
    from optuna.storages.journal import JournalFileBackend

    def storage():  # one per process, on one file
        return optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "o.journal")))

    sampler = optuna.samplers.TPESampler(seed=0, multivariate=True, n_startup_trials=2)
    study = optuna.create_study(study_name="s", storage=storage(), sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("y", 0, 1), 4)
    asked = study.ask()
    drawn = asked.relative_params  # the coordinator's draw: the joint space of x and y
    assert set(drawn) == {"x", "y"} and set(asked.relative_search_space or {}) == {"x", "y"}

    class Refuses(optuna.samplers.RandomSampler):
        def sample_relative(self, *args, **kwargs):
            raise AssertionError("the worker's sampler drew a relative sample")

        def sample_independent(self, *args, **kwargs):
            raise AssertionError("the worker's sampler drew a parameter")

    worker = optuna.load_study(study_name="s", storage=storage(), sampler=Refuses())
    trial = optuna.Trial(worker, _optuna.trial_id_of(asked))
    dist = FloatDistribution(0, 1)
    _optuna.give_relative_sample(trial, {"x": (dist, drawn["x"]), "y": (dist, drawn["y"])})
    assert trial.suggest_float("x", 0, 1) == drawn["x"]
    assert trial.suggest_float("y", 0, 1) == drawn["y"]
    assert study.trials[asked.number].params == drawn


def test_samplers_read_the_trials_through_the_view() -> None:
    """TPE reads a study's trials through ``Study._get_trials``: the view hpsearch gives a
    sampler (a changed space, a warm start) must be what it reads."""
    from hpsearch.search._carry import Carry, carried_sampler

    space = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=2))
    for x in (0.1, 0.2, 0.9):
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=space, value=x))
    calls = []
    carry = Carry(space)
    real = carry.visible

    def visible(trials, states):
        calls.append(len(trials))
        return real(trials, states)

    carry.visible = visible  # type: ignore[method-assign]
    study.sampler = carried_sampler(study.sampler, carry)
    study.ask(space)
    assert 3 in calls and 4 in calls  # the finished ones, and with the one being asked
    view = _optuna.sampler_view(study, lambda trials, states: trials[:1])
    assert len(view._get_trials(deepcopy=False, states=None, use_cache=False)) == 1
    assert view.directions == study.directions
