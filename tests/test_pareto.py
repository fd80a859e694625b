"""Multi-objective studies: the spec, Pareto fronts, pruning by fronts, tracking and views."""

from __future__ import annotations

import json
import math

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState
from typer.testing import CliRunner

from hpsearch import Study
from hpsearch.cli import app
from hpsearch.exceptions import SpecError
from hpsearch.search.pareto import (
    VALUES_ATTR,
    ParetoPruner,
    constraints_at,
    dominates,
    nondominated_fronts,
    rank_at_rung,
)
from hpsearch.search.schedulers import (
    PAUSED_AT,
    ParetoAshaScheduler,
    RungPoint,
    crowding_distances,
    pareto_order,
    promotable_points,
)
from hpsearch.spec import StudySpec
from hpsearch.testing._specs import user_spec
from tests.conftest import mlflow_runs

MAX_MIN = ["maximize", "minimize"]
# (val_accuracy, params) at one step: B dominates D and ME; ME dominates D.
A, B, C, D, E = (0.9, 9.0), (0.8, 5.0), (0.6, 1.0), (0.5, 8.0), (0.95, 20.0)
ME = (0.7, 7.0)


# ------------------------------------------------------------------ pure functions


def test_fronts_by_hand():
    assert nondominated_fronts([A, B, C, D, E, ME], MAX_MIN) == [0, 0, 0, 2, 0, 1]
    assert dominates(B, ME, MAX_MIN) and not dominates(A, B, MAX_MIN)


def test_rank_at_rung_by_hand():
    # Six trials, keep 6 // 3 = 2. ME is on the second front, behind four trials: pruned.
    r = rank_at_rung([A, B, C, D, E, ME], 5, MAX_MIN, reduction_factor=3)
    assert (r.front, r.n_fronts, r.ahead, r.n_trials, r.keep) == (2, 3, 4, 6, 2)
    assert not r.promoted
    # B is on the Pareto front: the front straddles the cut and goes on whole.
    r = rank_at_rung([A, C, D, E, ME, B], 5, MAX_MIN, reduction_factor=3)
    assert (r.front, r.ahead, r.promoted) == (1, 0, True)
    # With reduction factor 2 (keep 3), D is behind five trials on two better fronts.
    r = rank_at_rung([A, B, C, E, ME, D], 5, MAX_MIN, reduction_factor=2)
    assert (r.front, r.ahead, r.keep, r.promoted) == (3, 5, 3, False)
    # Alone at a rung, a trial goes on.
    assert rank_at_rung([ME], 0, MAX_MIN, reduction_factor=3).promoted


def _study_with(points_at_step: list[tuple[float, float]], step: int) -> optuna.Study:
    study = optuna.create_study(directions=MAX_MIN)
    for i, values in enumerate(points_at_step):
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.PRUNED if i % 2 else TrialState.COMPLETE,
                values=None if i % 2 else list(values),
                params={},
                distributions={},
                user_attrs={f"{VALUES_ATTR}{step}": list(values)},
            )
        )
    return study


def test_pruner_decides_and_explains_on_fixed_values():
    pruner = ParetoPruner(
        MAX_MIN, metrics=["val_accuracy", "params"], reduction_factor=3, max_resource=9
    )
    study = _study_with([A, B, C, D, E], step=3)
    prune, reason = pruner.should_prune(study, 99, 3, ME)
    assert prune
    assert reason == (
        "pareto pruner at step 3 (rung 1): val_accuracy 0.7, params 7 is on front 2 of 3 "
        "among 6 trials at that step, behind 4 trials on better fronts; only the top 1/3 "
        "(2 trials) go on"
    )
    assert pruner.should_prune(study, 99, 3, (0.99, 0.5)) == (False, None)  # dominates all
    assert pruner.should_prune(study, 99, 3, (0.7, 4.0)) == (False, None)  # on the front
    assert pruner.should_prune(study, 99, 2, ME) == (False, None)  # step 2 is no rung
    assert ParetoPruner(MAX_MIN, max_resource=3).should_prune(study, 99, 3, ME)[0] is False


# ------------------------------------------------------------------ the spec


def _spec(**objective):
    return {
        "name": "p",
        "objective": {"model": "cnn", **objective},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
    }


@pytest.mark.parametrize(
    "objective, expected",
    [
        (
            {"metrics": ["val_accuracy", "params"], "metric": "val_loss"},
            "studies/x.yaml: objective.metrics: give either metric and direction",
        ),
        (
            {"metrics": ["val_accuracy", "params"], "directions": ["maximize"]},
            "studies/x.yaml: objective.directions: 1 direction for 2 metrics",
        ),
        (
            {"metrics": ["val_accuracy", "paramz"]},
            "studies/x.yaml: objective.metrics: model 'cnn' does not report 'paramz'",
        ),
        (
            {"metrics": ["val_accuracy", "params"], "constraints": {"params": {"below": 3}}},
            "studies/x.yaml: objective.constraints: params: expected {max: N}, {min: N} or both",
        ),
    ],
)
def test_bad_objectives_are_one_line(objective, expected):
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(_spec(**objective), source="studies/x.yaml")
    assert len(info.value.problems) == 1
    assert str(info.value).startswith(expected)


def test_bad_pareto_pruner_option_is_one_line():
    data = {
        **_spec(metrics=["val_accuracy", "params"]),
        "search": {"pruner": {"name": "pareto", "reduction_factor": 1}},
    }
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(data, source="studies/x.yaml")
    assert str(info.value) == (
        "studies/x.yaml: search.pruner.reduction_factor: expected an integer >= 2, got 1"
    )


def test_multi_objective_spec_and_single_objective_hash():
    spec = StudySpec.from_dict(
        _spec(metrics=["val_accuracy", "params"], constraints={"params": {"max": 2e5}})
    )
    assert spec.is_multi_objective and spec.search.pruner.name == "pareto"
    assert [d.value for d in spec.directions] == ["maximize", "minimize"]
    assert "metric" not in spec.to_dict()["objective"]
    assert StudySpec.from_dict(spec.to_dict()).spec_hash == spec.spec_hash
    with pytest.raises(SpecError, match=r"search\.pruner: the median pruner ranks one value"):
        StudySpec.from_dict(
            {**_spec(metrics=["val_accuracy", "params"]), "search": {"pruner": "median"}}
        )
    # A single-objective study's spec (and hash) is as before multi-objective studies existed.
    single = StudySpec.from_yaml("studies/quickstart.yaml")
    assert not {"metrics", "directions", "constraints"} & set(single.to_dict()["objective"])
    assert single.spec_hash == "7e142aaec977"


# ------------------------------------------------------------------ studies on a cluster


def _plain_study(run_dir, name):
    storage = JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def _two_objective_spec(name, **search):
    spec = user_spec(name, "hpsearch.testing.objectives:two_objectives", **search)
    spec["objective"] = {
        "model": "hpsearch.testing.objectives:two_objectives",
        "metrics": ["cost", "error"],
        "directions": ["minimize", "minimize"],
        "constraints": {"cost": {"max": 0.8}},
        "epochs": 4,
    }
    spec["space"] = {
        "x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
        "y": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.5},
    }
    return spec


def test_known_front_in_optuna_api_cli_and_mlflow(run_dir, dask_client):
    spec = _two_objective_spec("front", n_trials=10, sampler="grid", pruner="none")
    study = Study(spec, run_dir=run_dir, client=dask_client)
    result = study.run(progress=False)
    plain = _plain_study(run_dir, "front")
    trials = plain.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 10 and len(plain.directions) == 2
    # The known front: y = 0, and x <= 0.8 for the constraint (x = 1 is infeasible).
    expected = {t.number for t in trials if t.params["y"] == 0.0 and t.params["x"] <= 0.8}
    assert len(expected) == 4
    front = {t.number for t in plain.best_trials}
    assert front == expected
    for t in trials:
        feasible = all(v <= 0 for v in t.constraints.values())
        assert feasible == (t.params["x"] <= 0.8)
    feasible = [t for t in trials if all(v <= 0 for v in t.constraints.values())]
    assert not any(
        dominates(o.values, t.values, ["minimize"] * 2)
        for t in feasible
        if t.number in front
        for o in feasible
    )
    assert {t.number for t in result.front} == front
    # The API and the CLI say the same.
    api = study.pareto_front()
    assert {t.number for t in api} == front
    assert all(set(t.values) == {"cost", "error"} for t in api)
    out = CliRunner().invoke(
        app,
        ["best", str(run_dir / "front"), "--json"],
    )
    assert out.exit_code == 0, out.output
    listed = json.loads(out.output)
    assert {t["number"] for t in listed} == front
    by_number = {t.number: t for t in trials}
    for item in listed:
        assert [item["values"]["cost"], item["values"]["error"]] == by_number[item["number"]].values
    table = CliRunner().invoke(app, ["best", str(run_dir / "front")])
    assert table.exit_code == 0 and "Pareto front, 4 trials" in table.output
    # MLflow: every objective per epoch, the pareto tag on each trial, the front on the study.
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "front")
    trial_runs = {
        int(r.data.tags["hpsearch.trial_number"]): r
        for r in runs
        if "hpsearch.trial_number" in r.data.tags
    }
    for number, run in trial_runs.items():
        assert run.data.tags["hpsearch.pareto"] == ("true" if number in front else "false")
        for metric in ("cost", "error"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
            assert sorted(steps) == [1, 2, 3]
    parent = next(r for r in runs if r.data.tags.get("hpsearch.role") == "study")
    assert parent.data.tags["hpsearch.pareto_trials"] == ",".join(map(str, sorted(front)))
    fig = study.plot_pareto_front()
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert labels == {"Pareto front", "dominated", "infeasible (constraints)"}
    frame = study.trials_dataframe()
    assert set(frame[frame.pareto].number) == front


def test_pruning_by_fronts_end_to_end(run_dir, dask_client):
    spec = _two_objective_spec(
        "mo-prune",
        n_trials=8,
        sampler="random",
        pruner={"name": "pareto", "reduction_factor": 2},
        max_concurrent=1,
    )
    spec["space"] = {
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "y": {"type": "float", "low": 0.0, "high": 1.0},
    }
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    plain = _plain_study(run_dir, "mo-prune")
    pruned = [t for t in plain.trials if t.state == TrialState.PRUNED]
    assert pruned, "halving at steps 1 and 2 stops some trials"
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "mo-prune")
    tags = {
        int(r.data.tags["hpsearch.trial_number"]): r.data.tags
        for r in runs
        if "hpsearch.trial_number" in r.data.tags
    }
    for t in pruned:
        reported = {
            int(k.removeprefix(VALUES_ATTR)): v
            for k, v in t.user_attrs.items()
            if k.startswith(VALUES_ATTR)
        }
        step = max(reported)
        # One trial at a time: the trials compared are every earlier one that reached step.
        earlier = [
            o.user_attrs[f"{VALUES_ATTR}{step}"]
            for o in plain.trials
            if o.number < t.number and f"{VALUES_ATTR}{step}" in o.user_attrs
        ]
        # The constraint (cost <= 0.8) ranks infeasible trials after the feasible ones.
        violations = [max(0.0, p[0] - 0.8) for p in [*earlier, reported[step]]]
        ranking = rank_at_rung(
            [*earlier, reported[step]],
            len(earlier),
            ["minimize"] * 2,
            reduction_factor=2,
            violations=violations,
        )
        assert not ranking.promoted
        reason = t.user_attrs["hpsearch.prune_reason"]
        if violations[-1] > 0:
            assert f"is infeasible (cost {reported[step][0]:.6g} > max 0.8)" in reason
        assert f"front {ranking.front} of {ranking.n_fronts}" in reason
        assert f"among {ranking.n_trials} trials at that step" in reason
        assert tags[t.number]["hpsearch.prune_reason"] == reason
        assert int(tags[t.number]["hpsearch.prune_step"]) == step


def test_objective_values_say_what_a_multi_objective_study_needs():
    from hpsearch.exceptions import TrialDiverged
    from hpsearch.search.pareto import constraint_values, objective_values

    spec = StudySpec.from_dict(_two_objective_spec("v", pruner="pareto"))
    assert objective_values((0.5, 2), spec) == [0.5, 2.0]
    with pytest.raises(TypeError, match=r"optimizes 2 metrics \(cost, error\): return a tuple"):
        objective_values(0.5, spec)
    with pytest.raises(TrialDiverged, match="error = nan"):
        objective_values((0.5, float("nan")), spec)
    assert constraint_values(spec.constraints, {"cost": 1.0}) == {"cost.max": pytest.approx(0.2)}


# ------------------------------------------------------------------ asha by Pareto fronts

# (a, b) at rung 0 (epoch 1), both minimized. Trial 1 dominates 2 and 4, 2 dominates 4; the
# Pareto front is 0, 1, 3 and 5.
RUNG0 = [(1.0, 5.0), (2.0, 2.0), (3.0, 3.0), (5.0, 1.0), (4.0, 4.0), (1.5, 4.0)]


def _mo_asha(constraints=None):
    return ParetoAshaScheduler(
        directions=["minimize", "minimize"],
        metrics=["a", "b"],
        constraints=constraints,
        min_epochs=1,
        reduction_factor=3,
        brackets=1,
        max_epochs=9,
    )


def _point(values, constraints, metrics=("a", "b")):
    bounds = constraints_at(constraints, metrics, values) if constraints else {}
    return RungPoint(tuple(values), bounds)


def _schedule(constraints=None):
    """Pause the trials of RUNG0 one by one, asking for work after each (as the coordinator
    does when a set is free); promoted trials pause at rung 1 and are not promoted from
    there (2 trials < eta). Returns the promotions and the reasons of the ended trials."""
    s = _mo_asha(constraints)
    order = []
    for number, values in enumerate(RUNG0):
        s.paused(number, 100 + number, 1, _point(values, constraints))
        job = s.next()
        order.append(None if job is None else (job.number, job.stop_at))
        if job is not None:
            s.paused(job.number, job.trial_id, 3, _point((0.5, 0.5), constraints))
            assert s.next() is None
    ended = s.closing(asking=False)
    assert all(e.state == TrialState.PRUNED for e in ended)
    return order, {e.number: e.reason for e in ended}


def test_crowding_distance_by_hand():
    # The front of RUNG0: along a, 0 (1) | 5 (1.5) | 1 (2) | 3 (5); along b, 3 | 1 | 5 | 0.
    # Trial 1: (5 - 1.5) / 4 + (4 - 1) / 4 = 1.625; trial 5: (2 - 1) / 4 + (5 - 2) / 4 = 1.0.
    front = [RUNG0[0], RUNG0[1], RUNG0[3], RUNG0[5]]
    assert crowding_distances(front) == [math.inf, 1.625, math.inf, 1.0]
    points = {n: RungPoint(v) for n, v in enumerate(RUNG0)}
    order, fronts = pareto_order(points, ["minimize", "minimize"])
    assert order == [0, 3, 1, 5, 2, 4]  # front 0 by crowding (ends first), then 2, then 4
    assert fronts == {0: 0, 1: 0, 2: 1, 3: 0, 4: 2, 5: 0}
    assert promotable_points(points, {0}, 3, ["minimize", "minimize"]) == [3]


def test_mo_asha_promotes_by_fronts_then_crowding():
    order, reasons = _schedule()
    # By hand: trial 2 makes rung 0 hold 3 (keep 1): 0 and 1 are on the front, both at its
    # ends (infinite crowding), the earlier goes: 0 -> epoch 3. Trials 3 and 4: the top 1 is
    # still 0. Trial 5: 6 trials, keep 2: the front 0, 1, 3, 5 straddles the cut and the
    # ends 0 and 3 go before 1 (1.625) and 5 (1.0): 3 -> epoch 3.
    assert order == [None, None, (0, 3), None, None, (3, 3)]
    assert set(reasons) == {0, 1, 2, 3, 4, 5}
    assert reasons[1] == (
        "asha: paused at rung 0 (epoch 1) and never promoted: a 2, b 2 on front 1 of 3 among "
        "the rung's 6 trials; only the top 1/3 (2 trials) go on; its front's 4 trials were "
        "split by crowding distance and it ranked 3 of them"
    )
    assert "front 1 of 3" in reasons[5] and "it ranked 4 of them" in reasons[5]
    assert reasons[2].endswith(
        "on front 2 of 3 among the rung's 6 trials; only the top 1/3 (2 trials) go on"
    )
    assert "on front 3 of 3" in reasons[4] and "crowding" not in reasons[4]
    assert reasons[0].startswith("asha: paused at rung 1 (epoch 3)")
    assert reasons[0].endswith("fewer than 3 trials reached the rung (no cut-off)")


def test_constraints_change_the_promotion_and_the_pruning():
    # a <= 4 makes trial 3 (a = 5) infeasible: it ranks after every feasible trial, and the
    # feasible front 0, 1, 5 keeps its ends 0 and 1 in the top 2.
    order, reasons = _schedule({"a": {"max": 4.0}})
    assert order == [None, None, (0, 3), None, None, (1, 3)]
    assert reasons[3] == (
        "asha: paused at rung 0 (epoch 1) and never promoted: a 5, b 1 is infeasible "
        "(a 5 > max 4), ranked after every feasible trial, on front 4 of 4 among the rung's "
        "6 trials; only the top 1/3 (2 trials) go on"
    )
    # The pareto pruner: (0.99, 7) is on the front, but over params <= 6 only B and C are
    # feasible, and they fill the top 2 of 6. The infeasible trials follow by violation:
    # (0.99, 7) by 1, then D by 2, A by 3 and E by 14: 5 fronts.
    point = (0.99, 7.0)
    study = _study_with([A, B, C, D, E], step=3)
    plain = ParetoPruner(MAX_MIN, metrics=["val_accuracy", "params"], max_resource=9)
    assert plain.should_prune(study, 99, 3, point) == (False, None)
    bounded = ParetoPruner(
        MAX_MIN,
        metrics=["val_accuracy", "params"],
        max_resource=9,
        constraints={"params": {"max": 6.0}},
    )
    own = constraints_at(bounded.constraints, bounded.metrics, point)
    prune, reason = bounded.should_prune(study, 99, 3, point, own)
    assert prune and reason is not None
    assert "is infeasible (params 7 > max 6), ranked after the feasible: front 2 of 5" in reason
    assert "behind 2 trials on better fronts" in reason
    # A feasible trial at the same place is not held back by infeasible ones.
    assert bounded.should_prune(study, 99, 3, (0.99, 6.0), {"params.max": 0.0}) == (False, None)


def test_mo_asha_rungs_are_rebuilt_after_a_restart():
    """A coordinator that restarts rebuilds the rungs from the values the study holds: the
    same promotion as if it had never stopped."""
    study = optuna.create_study(directions=["minimize", "minimize"])
    for values in RUNG0:
        trial = study.ask()
        trial.set_user_attr(f"{VALUES_ATTR}1", list(values))
        trial.set_user_attr(PAUSED_AT, 1)
    s = _mo_asha()
    assert s.restore(study.get_trials(deepcopy=False)) == []
    assert sorted(s.waiting) == [0, 1, 2, 3, 4, 5]
    first, second = s.next(), s.next()
    assert first is not None and second is not None
    assert [(first.number, first.stop_at), (second.number, second.stop_at)] == [(0, 3), (3, 3)]
    assert s.next() is None


def _mo_asha_spec(name, n_trials):
    spec = _two_objective_spec(name, n_trials=n_trials, sampler="random")
    spec["objective"]["model"] = "hpsearch.testing.objectives:two_objectives_checkpointed"
    spec["search"].pop("pruner")  # the scheduler ranks the rungs: no pareto pruner by default
    spec["search"].update({"scheduler": "asha", "asha": {"min_epochs": 1, "reduction_factor": 2}})
    assert StudySpec.from_dict(spec).search.pruner.name == "none"
    spec["space"] = {
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "y": {"type": "float", "low": 0.0, "high": 1.0},
    }
    return spec


def _trained_steps(run_dir, name, number):
    notes = run_dir / name / f"notes-{number}-rank0.txt"
    return [int(s) for s in notes.read_text().split()[1::2]] if notes.exists() else []


def test_mo_asha_study_ends_clean_with_reasons_and_the_front(run_dir, dask_client):
    spec = _mo_asha_spec("mo-asha", n_trials=8)
    study = Study(spec, run_dir=run_dir, client=dask_client)
    study.run(progress=False)
    plain = _plain_study(run_dir, "mo-asha")
    trials = plain.get_trials(deepcopy=False)
    assert len(trials) == 8
    assert not [t for t in trials if t.state == TrialState.RUNNING], "nothing left RUNNING"
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert pruned and complete and len(pruned) + len(complete) == 8
    by_step: dict[int, dict[int, RungPoint]] = {}  # rung epoch -> trial -> values there
    for t in trials:
        for key, values in t.user_attrs.items():
            if key.startswith(VALUES_ATTR):
                step = int(key.removeprefix(VALUES_ATTR))
                point = _point(values, {"cost": {"max": 0.8}}, ("cost", "error"))
                by_step.setdefault(step, {})[t.number] = point
        steps = _trained_steps(run_dir, "mo-asha", t.number)
        assert steps == list(range(1, len(steps) + 1)), "each step trained once"
    for t in pruned:
        rung_epoch = max(
            int(k.removeprefix(VALUES_ATTR)) for k in t.user_attrs if k.startswith(VALUES_ATTR)
        )
        assert rung_epoch in (1, 2)
        points = by_step[rung_epoch]
        _, fronts = pareto_order(points, ["minimize", "minimize"])
        reason = t.user_attrs["hpsearch.prune_reason"]
        assert reason.startswith(f"asha: paused at rung {rung_epoch - 1} (epoch {rung_epoch})")
        assert (
            f"front {fronts[t.number] + 1} of {max(fronts.values()) + 1} among the rung's "
            f"{len(points)} trials" in reason
        )
        if points[t.number].violation > 0:
            assert "is infeasible (cost " in reason and "> max 0.8)" in reason
    assert {t.number for t in study.pareto_front()} == {t.number for t in plain.best_trials}
    assert all(all(v <= 0 for v in t.constraints.values()) for t in plain.best_trials)


def test_three_objectives_plot_every_pair():
    from hpsearch.study._analysis import plot_pareto_front

    study = optuna.create_study(directions=["minimize", "minimize", "maximize"])
    for values in [(1, 3, 2), (2, 2, 2), (3, 1, 2), (3, 3, 1), (2, 2, 3)]:
        study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, values=list(values)))
    fig = plot_pareto_front(study, metrics=["a", "b", "c"])
    shown = [ax for ax in fig.axes if ax.axison]
    assert len(fig.axes) == 4 and len(shown) == 3, "a 2x2 grid, its upper cell hidden"
    pairs = {(ax.get_xlabel(), ax.get_ylabel()) for ax in shown}
    assert pairs == {
        ("", "b (minimize)"),
        ("a (minimize)", "c (maximize)"),
        ("b (minimize)", ""),
    }
    # Trial 1 (2, 2, 2) is dominated by trial 4 (2, 2, 3); 3 (3, 3, 1) by every other one.
    front = {t.number for t in study.best_trials}
    assert front == {0, 2, 4}
    labels = {t.get_text() for t in fig.axes[1].get_legend().get_texts()}
    assert labels == {"Pareto front", "dominated"}
    for ax in shown:
        names = {a.get_text() for a in ax.texts}
        assert names == {"#0", "#2", "#4"}


class _StopAtPause(Exception):
    pass


def test_mo_asha_coordinator_restart_keeps_the_paused_trial(run_dir, dask_client):
    """A coordinator stopped once a trial paused leaves it RUNNING at its rung; the next one
    rebuilds the rungs from every objective's values and promotes or prunes it, without
    training its first epoch again."""
    name = "mo-asha-restart"
    spec = _mo_asha_spec(name, n_trials=4)
    spec["search"]["max_concurrent"] = 1  # one trial at a time: the stop finds one paused

    def stop(progress):
        if progress.last is not None and progress.last.state == "PAUSED":
            raise _StopAtPause

    with pytest.raises(_StopAtPause):
        Study(spec, run_dir=run_dir, client=dask_client).run(on_progress=stop)
    paused = [t for t in _plain_study(run_dir, name).trials if t.user_attrs.get(PAUSED_AT)]
    assert len(paused) == 1 and paused[0].state == TrialState.RUNNING
    first = paused[0].number
    assert paused[0].user_attrs[f"{VALUES_ATTR}1"] and _trained_steps(run_dir, name, first) == [1]
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    plain = _plain_study(run_dir, name)
    assert len(plain.trials) == 4, "the budget counts the paused trial once"
    assert not [t for t in plain.trials if t.state == TrialState.RUNNING]
    assert plain.trials[first].state in (TrialState.COMPLETE, TrialState.PRUNED)
    for t in plain.trials:
        if t.state != TrialState.FAIL:
            steps = _trained_steps(run_dir, name, t.number)
            assert steps == list(range(1, len(steps) + 1)), (t.number, steps)
        if t.state == TrialState.PRUNED:
            assert "among the rung's" in t.user_attrs["hpsearch.prune_reason"]
