"""asha with ``brackets: auto``: the estimate of how well each rung predicts the last epoch,
the brackets new trials start in, what the study keeps and shows, and a restart."""

from __future__ import annotations

import logging
import random
import re
from typing import Any, cast

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.search.schedulers import (
    BRACKET,
    DECISIONS,
    ESTIMATE,
    TARGET,
    AdaptiveAshaScheduler,
    AshaScheduler,
    adaptation_tags,
    build_scheduler,
    describe,
    estimate_rung,
)
from hpsearch.simulation import simulate
from hpsearch.spec import StudySpec

LADDER = [1, 3, 9, 27]


def _auto() -> AdaptiveAshaScheduler:
    return AdaptiveAshaScheduler(min_epochs=1, reduction_factor=3, max_epochs=52, maximize=True)


def _feed(s: AdaptiveAshaScheduler, curves: list[dict[int, float]]) -> None:
    """Unpaused trials (the last bracket) that reached epoch 52 with these values."""
    for number, curve in enumerate(curves, start=1000):
        s.bracket_of[number] = len(LADDER)
        s.observe(number, lambda curve=curve: curve)


def _curves(early: str, n: int = 90) -> list[dict[int, float]]:
    """``n`` curves whose final values are 0..n-1; at epoch 1 the ranking is ``early``
    (perfect, none: shuffled, inverted); at later rungs it is perfect."""
    rng = random.Random(0)
    shuffled = list(range(n))
    rng.shuffle(shuffled)
    out = []
    for i in range(n):
        first = {"perfect": i, "none": shuffled[i], "inverted": n - i}[early]
        out.append({1: float(first), 3: float(i), 9: float(i), 27: float(i), 52: float(i)})
    return out


@pytest.mark.parametrize(
    ("early", "hits", "low", "high"),
    [("perfect", 10, 0.9, 1.0), ("none", None, 0.0, 0.6), ("inverted", 0, 0.0, 0.15)],
)
def test_the_estimate_of_hand_built_rungs(early, hits, low, high):
    pairs = [(c[1], c[52]) for c in _curves(early)]
    rung = estimate_rung(1, pairs, 3, maximize=True)
    assert rung.pairs == 90 and rung.top == 10
    if hits is not None:
        assert rung.hits == hits
    assert low <= rung.survival <= high
    assert rung.rho is not None
    assert {"perfect": rung.rho > 0.99, "none": abs(rung.rho) < 0.3, "inverted": rung.rho < -0.99}[
        early
    ]
    assert rung.rho_low is not None and rung.rho_low <= rung.rho + 1e-6
    assert rung.rho <= (rung.rho_high or 1) + 1e-6


def test_the_budget_shifts_the_right_way():
    """Before any evidence and where epoch 1 predicts: new trials start at epoch 1. Where it
    does not (and epoch 3 does): at epoch 3. Where no rung predicts: no pause."""
    fresh = _auto()
    assert fresh.best == 0 and fresh.weights[0] > 0.9
    perfect, none, inverted = _auto(), _auto(), _auto()
    _feed(perfect, _curves("perfect"))
    _feed(none, _curves("none"))
    _feed(inverted, _curves("inverted"))
    assert perfect.best == 0
    assert none.best == 1 and inverted.best == 1
    assert none.weights[1] > 0.9 and none.first_epoch(none.best) == 3
    nothing = _auto()
    rng = random.Random(1)
    _feed(nothing, [{e: rng.random() for e in [*LADDER, 52]} for _ in range(90)])
    assert nothing.best == len(LADDER) and nothing.weights == [0, 0, 0, 0, 1]
    # New trials follow the weights, deterministically (probes of the last bracket first).
    picks = [none.stop_at(n) for n in range(200)]
    assert picks.count(3) > 150 and picks.count(None) >= 1 and 1 not in picks


def _finishers(s: AdaptiveAshaScheduler, finals: list[float]) -> None:
    """Trials of the first bracket promoted from its last rung that reached epoch 52."""
    for number, value in enumerate(finals, start=5000):
        s.bracket_of[number] = 0
        s.brackets[0].promoted[-1].add(number)
        s.observe(number, lambda value=value: {27: value, 52: value})


@pytest.mark.parametrize(("better", "passed"), [(True, []), (False, [0])])
def test_the_estimate_is_checked_against_what_reached_the_last_epoch(better, passed):
    """Early epochs rank the unpaused sample perfectly; the first bracket is passed over only
    where what it brought to the last epoch falls behind the unpaused trials per epoch (the
    best at scale are not where the sample said)."""
    s = _auto()
    _finishers(s, [200.0 + i if better else -1.0 - i for i in range(20)])
    _feed(s, _curves("perfect"))
    assert s.passed == passed
    assert s.best == (0 if better else len(LADDER))  # refuted: the measured brackets only
    assert s.estimate()["passed_over"] == passed
    assert s.estimate()["finished"]["0"] == [(20 + 90) // 9 if better else 0, 20]
    line = s.adaptations()[-1].line
    assert "in the top 1/9 of the 110 trials at epoch 52: bracket 0" in line
    assert ("passed over" in line) is not better
    assert ("passed over: bracket 0" in describe(s.estimate())) is not better  # hpsearch status


def test_decisions_are_lines_with_what_was_measured():
    s = _auto()
    _feed(s, _curves("inverted"))
    news = s.adaptations()
    assert news and s.adaptations() == []
    changed = [a for a in news if a.changed]
    assert changed, [a.line for a in news]
    line = changed[0].line
    assert "trained to epoch 52 without pausing" in line and "survival" in line
    assert "now start at epoch 3 (was epoch 1)" in line
    tags = adaptation_tags({ESTIMATE: news[-1].estimate, DECISIONS: [a.line for a in changed]})
    assert tags["hpsearch.asha.decision.1"] == line
    assert "new trials start at epoch 3" in tags["hpsearch.asha.estimate"]


def _spec(**asha: Any) -> StudySpec:
    search: dict[str, Any] = {"n_trials": 400, "sampler": "random", "scheduler": "asha", "seed": 5}
    if asha:
        search["asha"] = asha
    return StudySpec.from_dict(
        {
            "name": "auto",
            "objective": {"model": "synthetic", "epochs": 27},
            "search": search,
            "cluster": {"backend": "simulated", "simulated": {"workers": 8}},
        }
    )


def test_brackets_default_to_auto_and_a_number_keeps_fixed_brackets():
    assert _spec().search.asha.brackets == "auto"
    assert isinstance(build_scheduler(_spec()), AdaptiveAshaScheduler)
    for n in (1, 4):
        fixed = build_scheduler(_spec(brackets=n))
        assert type(fixed) is AshaScheduler and len(fixed.brackets) == n
    with pytest.raises(Exception, match="auto"):
        _spec(brackets=0)


def test_a_simulated_study_is_reproducible_and_resumes_with_its_estimate(tmp_path, caplog):
    spec = _spec()
    with caplog.at_level(logging.INFO, logger="hpsearch.search.schedulers"):
        first = simulate(spec, study_dir=tmp_path / "a")
    second = simulate(spec, study_dir=tmp_path / "b")
    brackets = [t.user_attrs.get(BRACKET) for t in first.study.trials]
    assert brackets == [t.user_attrs.get(BRACKET) for t in second.study.trials]
    assert [t.value for t in first.study.trials] == [t.value for t in second.study.trials]
    assert set(brackets) >= {0, 3}  # probes of the unpaused bracket (27 epochs: ladder 1, 3, 9)
    kept = first.study.user_attrs[ESTIMATE]
    assert kept == second.study.user_attrs[ESTIMATE] and kept["trials"] >= 9
    assert first.study.user_attrs[DECISIONS]
    assert any("asha brackets auto" in r.message for r in caplog.records)
    # A coordinator that starts again rebuilds the same estimate from the study's trials.
    again = build_scheduler(spec)
    assert isinstance(again, AdaptiveAshaScheduler)
    again.restore(first.study.get_trials())
    assert again.estimate() == kept
    (resumed,) = again.adaptations()
    assert "resumed" in resumed.line and not resumed.changed
    assert all(again.bracket_of[t.number] == t.user_attrs[BRACKET] for t in first.study.trials)


def test_a_study_begun_with_one_bracket_goes_on_with_one():
    """An old study (its trials have a target epoch, none a bracket) resumed under auto."""
    study = optuna.create_study(direction="maximize")
    for i in range(5):
        trial = study.ask()
        trial.set_user_attr(TARGET, 1)
        trial.report(float(i), 1)
        study.tell(trial, state=TrialState.PRUNED)
    s = _auto()
    s.restore(study.get_trials())
    assert s.legacy and s.adaptations()[0].estimate["legacy"]
    assert [s.stop_at(n) for n in range(5, 40)] == [1] * 35
    assert s.trial_attrs(7) == {}


def test_a_coordinator_killed_mid_study_goes_on_with_the_same_estimate(tmp_path, caplog):
    """The simulated cluster kills the real coordinator at 60 s and starts it again: the new
    one rebuilds, from the study's trials, the estimate the killed one had last made, says
    so, and its new trials start where that estimate says."""
    data = _spec().to_dict()
    data["cluster"]["simulated"]["restart_coordinator_at"] = [60]
    spec = StudySpec.from_dict(data)
    with caplog.at_level(logging.INFO, logger="hpsearch.search.schedulers"):
        sim = simulate(spec, study_dir=tmp_path / "killed")
    assert sim.coordinator_restarts == 1
    lines = [r.message for r in caplog.records if r.message.startswith("asha brackets auto")]
    (at,) = [i for i, line in enumerate(lines) if "resumed: " in line]
    assert at > 0, "the killed coordinator had made an estimate"

    def measured(line: str) -> str:  # what was measured, without what was done with it
        return re.sub(r"; (resumed: |unchanged: |new trials now )[^;]*;", ";", line)

    assert measured(lines[at]) == measured(lines[at - 1])
    trials = sim.study.trials
    assert len(trials) == 400 and all(BRACKET in t.user_attrs for t in trials)
    # The same seed, killed or not, sends the first trials to the same brackets.
    calm = simulate(_spec(), study_dir=tmp_path / "calm")
    first = [t.user_attrs[BRACKET] for t in calm.study.trials[:9]]
    assert first == [t.user_attrs[BRACKET] for t in trials[:9]] == [3] * 9


def test_each_estimate_tags_the_study_run_as_the_study_goes(tmp_path):
    """The coordinator's scheduling tags the study's MLflow run with the estimate and the
    decisions as they are made, not only when the study ends."""
    from mlflow import MlflowClient

    from hpsearch.coordinator import Progress, Scheduling
    from hpsearch.tracking import TrackingTarget, flush, get_client

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = get_client(uri)
    experiment = client.create_experiment("auto")
    parent = client.create_run(experiment).info.run_id
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, direction="maximize")
    data = _spec().to_dict()
    data["objective"]["epochs"] = 52
    scheduling = Scheduling(
        StudySpec.from_dict(data),
        study,
        storage=storage,
        distributions={},
        size_of=lambda params: 1.0,
        progress=Progress(n_trials=1),
        host=cast(Any, None),
        tracking=TrackingTarget(uri, experiment, parent, "auto"),
    )
    scheduler = scheduling.scheduler
    assert isinstance(scheduler, AdaptiveAshaScheduler)
    _feed(scheduler, _curves("inverted"))
    scheduling.adapted()
    assert flush(30) == 0
    tags = MlflowClient(uri).get_run(parent).data.tags
    assert "new trials start at epoch 3" in tags["hpsearch.asha.estimate"]
    prefix = "hpsearch.asha.decision."
    numbered = {int(k.removeprefix(prefix)): v for k, v in tags.items() if k.startswith(prefix)}
    decisions = [numbered[i] for i in sorted(numbered)]
    assert decisions == study.user_attrs[DECISIONS]
    assert any("now start at epoch 3 (was epoch 1)" in line for line in decisions)
    # The same estimate on the study's metrics endpoint, what each bracket finished included.
    series = {
        (name, tuple(labels.items())): value for name, _, _, labels, value in scheduling.figures()
    }
    assert series[("hpsearch_asha_first_epoch", ())] == 3
    assert series[("hpsearch_asha_finished", (("bracket", "4"),))] == 90
    assert series[("hpsearch_asha_finished_top", (("bracket", "4"),))] == 10
    assert series[("hpsearch_asha_passed_over", (("bracket", "4"),))] == 0


def test_the_first_trials_train_unpaused_and_a_restart_counts_those_it_had():
    """The first eta**2 picks go to the unpaused bracket (a small study: a quarter of its
    trials); a coordinator started again on a study that has some deals only the rest."""
    fresh = _auto()
    assert [fresh.stop_at(n) for n in range(10)] == [None] * 9 + [1]
    small = AdaptiveAshaScheduler(
        min_epochs=1, reduction_factor=3, max_epochs=52, maximize=True, n_trials=18
    )
    assert [small.stop_at(n) for n in range(6)] == [None] * 5 + [1]
    study = optuna.create_study(direction="maximize")
    for _ in range(4):
        trial = study.ask()
        trial.set_user_attr(BRACKET, len(LADDER))
        trial.set_user_attr(TARGET, 52)
    again = _auto()
    again.restore(study.get_trials())
    assert [again.stop_at(n) for n in range(4, 10)] == [None] * 5 + [1]
