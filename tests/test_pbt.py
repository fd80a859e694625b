"""Population-based training: the exploit and explore decisions on fixed values, and real
studies on a 2-slot cluster where weak trials continue from a strong trial's checkpoint."""

from __future__ import annotations

import itertools
import math
import random

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.exceptions import SpecError
from hpsearch.search.schedulers import FROM_EPOCH, PARENT_TRIAL, PbtScheduler, exploit, perturb
from hpsearch.spec import StudySpec
from hpsearch.testing import user_spec
from tests.conftest import mlflow_runs

DISTRIBUTIONS = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "dropout": FloatDistribution(0.0, 0.5, step=0.1),
    "units": IntDistribution(32, 128, step=32),
    "layers": IntDistribution(1, 64, log=True),
    "optimizer": CategoricalDistribution(["adam", "sgd", "rmsprop"]),
}


def _pbt(params, **kw):
    args = {
        "population": 4,
        "interval_epochs": 2,
        "quantile": 0.25,
        "perturb": (0.8, 1.2),
        "resample_probability": 0.0,
        "distributions": {"lr": DISTRIBUTIONS["lr"]},
        "mutate": None,
        "n_trials": 8,
        "max_epochs": 6,
        "maximize": True,
    }
    return PbtScheduler(**{**args, **kw}, params_of=lambda trial_id: params[trial_id])


def test_exploit_by_hand():
    # Ranked best first: 3 (0.9), 0 (0.8), 4 (0.7), 1 (0.6), 2 (0.5); a quarter of 5 is 1.
    values = {0: 0.8, 1: 0.6, 2: 0.5, 3: 0.9, 4: 0.7}
    assert exploit(values, 0.25, True) == ([2], [3])
    assert exploit(values, 0.5, True) == ([2, 1], [3, 0])
    assert exploit(values, 0.5, False) == ([3, 0], [2, 1])
    assert exploit({0: 1.0, 1: 1.0}, 0.5, True) == ([1], [0]), "ties: the earlier trial first"
    assert exploit({0: 1.0, 1: 2.0, 2: 3.0}, 0.25, True) == ([], [])


def test_a_generation_is_decided_when_its_last_member_pauses():
    params = {10 + n: {"lr": lr} for n, lr in enumerate([0.01, 0.02, 0.03, 0.04])}
    sched = _pbt(params)
    assert sched.budget(20) == 4
    assert [sched.stop_at(n) for n in range(4)] == [2, 2, 2, 2]
    for n, value in [(0, 0.5), (1, 0.9), (2, 0.7)]:
        sched.paused(n, 10 + n, 2, value)
        assert sched.decided() == [], "three of four members: the generation waits"
    sched.paused(3, 13, 2, 0.6)
    jobs = sched.decided()
    # Bottom quarter: trial 0 (0.5); top quarter: trial 1 (0.9), lr 0.02 times 0.8 or 1.2.
    assert [(j.number, j.trial_id, j.stop_at) for j in jobs[1:]] == [
        (1, 11, 4),
        (2, 12, 4),
        (3, 13, 4),
    ]
    child = jobs[0]
    assert child.trial_id is None and child.copy_from == 1 and child.stop_at == 4
    assert child.attrs == {PARENT_TRIAL: 1, FROM_EPOCH: 2}
    assert child.params["lr"] in (pytest.approx(0.016), pytest.approx(0.024))
    assert child.replaces is not None and child.replaces.number == 0
    assert child.replaces.state == TrialState.PRUNED and child.replaces.trial_id == 10
    assert child.replaces.reason.startswith(
        "pbt: replaced at epoch 2 by a continuation of trial 1: value 0.5 in the bottom 1"
    )
    # The same seed, epoch and member draw the same continuation.
    again = _pbt(params)
    for n in range(4):
        again.stop_at(n)
    for n, value in [(0, 0.5), (1, 0.9), (2, 0.7), (3, 0.6)]:
        again.paused(n, 10 + n, 2, value)
    assert again.decided()[0] == child
    # The last interval: members resumed from epoch 4 run to the end (stop_at None).
    for n, value in [(1, 0.95), (2, 0.75), (3, 0.7)]:
        sched.paused(n, 10 + n, 4, value)
    # (trial 0, replaced, is not told as ended: its continuation, trial 4, took its place)
    sched.paused(4, 14, 4, 0.8)
    jobs = sched.decided()
    assert [j.stop_at for j in jobs] == [None] * 4
    assert [j.copy_from for j in jobs if j.trial_id is None] == [1]


def test_the_budget_caps_the_continuations():
    params = {n: {"lr": 0.01 * (n + 1)} for n in range(4)}
    sched = _pbt(params, quantile=0.5, n_trials=5)
    for n in range(4):
        sched.stop_at(n)
    for n in range(4):
        sched.paused(n, n, 2, 0.1 * n)
    jobs = sched.decided()
    # Bottom half: 0 and 1; one trial of budget left: trial 0 (the first) is replaced.
    (child,) = [j for j in jobs if j.trial_id is None]
    assert child.copy_from in (2, 3), "a member of the top half"
    assert [j.replaces.number for j in jobs if j.replaces is not None] == [0]
    assert [j.number for j in jobs if j.trial_id is not None] == [1, 2, 3]


def test_a_failed_member_ends_its_line_and_the_generation_goes_on():
    sched = _pbt({n: {"lr": 0.01} for n in range(3)}, population=3)
    for n in range(3):
        sched.stop_at(n)
    sched.paused(0, 0, 2, 0.5)
    sched.paused(1, 1, 2, 0.6)
    assert sched.decided() == []
    sched.ended(2, TrialState.FAIL)
    assert [j.number for j in sched.decided()] == [0, 1], "int(0.25 * 2) = 0: both go on"


@pytest.mark.parametrize("resample", [0.0, 0.5, 1.0])
def test_perturbation_stays_in_bounds(resample):
    rng = random.Random(1)
    params = {"lr": 0.05, "dropout": 0.4, "units": 96, "layers": 50, "optimizer": "adam"}
    seen = {name: set() for name in params}
    for _ in range(300):
        out = perturb(
            params,
            DISTRIBUTIONS,
            rng,
            factors=(0.5, 2.0),
            resample_probability=resample,
            names=list(DISTRIBUTIONS),
        )
        for name, dist in DISTRIBUTIONS.items():
            assert dist._contains(dist.to_internal_repr(out[name])), (name, out[name])
            seen[name].add(out[name])
        assert isinstance(out["units"], int) and isinstance(out["layers"], int)
        assert out["units"] % 32 == 0
        assert math.isclose(out["dropout"] * 10, round(out["dropout"] * 10))
    if resample == 0.0:
        # Only the factors: lr 0.025 or 0.1 (clipped at the bound), dropout 0.2 or 0.5.
        assert seen["lr"] == {0.025, 0.1} and seen["dropout"] == {0.2, 0.5}
        assert seen["units"] == {32, 128} and seen["layers"] == {25, 64}
    assert seen["optimizer"] == {"adam", "sgd", "rmsprop"}, "a categorical is drawn afresh"
    # Parameters not named are copied as they are.
    kept = perturb(
        params, DISTRIBUTIONS, rng, factors=(0.5, 2.0), resample_probability=1.0, names=["lr"]
    )
    assert {k: v for k, v in kept.items() if k != "lr"} == {
        k: v for k, v in params.items() if k != "lr"
    }


def _pbt_spec(name: str, *, n_trials: int = 7, **pbt):
    spec = user_spec(
        name,
        "hpsearch.testing.objectives:lineage_walk",
        n_trials=n_trials,
        space={"rate": {"type": "float", "low": 0.05, "high": 0.5, "log": True}},
    )
    spec["objective"]["epochs"] = 6
    spec["search"].update(
        {
            "pruner": "none",
            "scheduler": "pbt",
            "pbt": {
                "population": 4,
                "interval_epochs": 2,
                "quantile": 0.5,
                "perturb": [0.8, 1.2],
                "resample_probability": 0.25,
                **pbt,
            },
        }
    )
    return spec


@pytest.mark.parametrize(
    ("change", "line"),
    [
        ({"quantile": 0.6}, "search.pbt.quantile: must be > 0 and <= 0.5, got 0.6"),
        ({"quantile": 0}, "search.pbt.quantile: must be > 0 and <= 0.5, got 0"),
        ({"population": 1}, "search.pbt.population: "),
        ({"interval_epochs": 6}, "search.pbt.interval_epochs: must be below objective.epochs (6)"),
        ({"perturb": [1.0, 1.2]}, "search.pbt.perturb: expected 0 < down < 1 < up, got [1, 1.2]"),
        ({"perturb": [0.8]}, "search.pbt.perturb: expected two factors"),
        ({"resample_probability": 2}, "search.pbt.resample_probability: "),
        ({"population": 9}, "search.n_trials: counts every trial of a pbt study"),
        ({"mutate": ["lr"]}, "search.pbt.mutate: 'lr' is not a searched parameter"),
    ],
)
def test_pbt_spec_errors_are_one_line(change, line):
    with pytest.raises(SpecError) as err:
        StudySpec.from_dict(_pbt_spec("bad", **change))
    (problem,) = err.value.problems
    assert problem.startswith(f"<study>: {line}"), problem


def test_pbt_spec_error_from_the_cli_exits_2(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from hpsearch.cli import app

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_pbt_spec("bad", quantile=0.75)))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "search.pbt.quantile" in lines[0], result.output
    assert "Traceback" not in result.output


def _study(run_dir, name):
    return optuna.load_study(
        study_name=name,
        storage=JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal"))),
    )


def _steps(run_dir, name, number, rank=0):
    path = run_dir / name / f"notes-{number}-rank{rank}.txt"
    return [int(s) for s in path.read_text().split()[1::2]] if path.exists() else []


def check_pbt_study(run_dir, name, *, n_trials, population=4, quantile=0.5, ranks=1):
    """The study's lineage: what each continuation loaded is its parent's state at
    from_epoch; bottom members were replaced; nothing is left RUNNING in Optuna or MLflow."""
    study = _study(run_dir, name)
    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    assert not [t for t in trials if t.state == TrialState.RUNNING], "nothing left RUNNING"
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), [
        (t.number, t.state, t.user_attrs.get("hpsearch.fail_reason")) for t in trials
    ]
    first = [t for t in trials if PARENT_TRIAL not in t.user_attrs]
    children = [t for t in trials if PARENT_TRIAL in t.user_attrs]
    assert len(first) == population and children, "the sampler gave the population"
    assert len(trials) <= n_trials
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == population, "every line reaches the last epoch once"
    for t in trials:
        start = int(t.user_attrs.get(FROM_EPOCH, 0))
        steps = _steps(run_dir, name, t.number)
        assert steps == list(range(start + 1, max(t.intermediate_values) + 1)), (t.number, steps)
        for rank in range(1, ranks):
            assert _steps(run_dir, name, t.number, rank) == steps, "every rank, the same steps"
        assert min(t.intermediate_values) == start + 1, "a continuation reports after its start"
        if t.state == TrialState.PRUNED:
            reason = t.user_attrs["hpsearch.prune_reason"]
            assert reason.startswith(f"pbt: replaced at epoch {max(t.intermediate_values)} ")
    for child in children:
        parent = by_number[child.user_attrs[PARENT_TRIAL]]
        epoch = child.user_attrs[FROM_EPOCH]
        assert epoch in parent.intermediate_values and epoch < max(parent.intermediate_values)
        # The continuation loaded the parent's own state at from_epoch (its w gave the value).
        loaded = child.user_attrs[f"loaded_{epoch}"]
        assert loaded["trial"] == parent.number
        assert loaded["w"] == pytest.approx(1.0 - parent.intermediate_values[epoch], abs=1e-12)
        rate = child.params["rate"]
        assert 0.05 <= rate <= 0.5
        # The replaced member was in the bottom quantile of its interval, the parent in the top.
        values = {
            t.number: t.intermediate_values[epoch] for t in trials if epoch in t.intermediate_values
        }
        bottom, top = exploit(values, quantile, maximize=False)
        replaced = [
            t.number
            for t in trials
            if t.state == TrialState.PRUNED and max(t.intermediate_values) == epoch
        ]
        assert set(replaced) <= set(bottom) and parent.number in top, (epoch, values, replaced)
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", name)
    study_run = next(r for r in runs if r.data.tags.get("hpsearch.role") == "study")
    trial_runs = {int(r.data.tags["hpsearch.trial_number"]): r for r in runs if r is not study_run}
    assert set(trial_runs) == set(by_number), "one run per trial, continuations included"
    for number, run in trial_runs.items():
        t = by_number[number]
        assert run.info.status == "FINISHED" and run.data.tags["hpsearch.state"] == t.state.name
        assert run.data.tags["mlflow.parentRunId"] == study_run.info.run_id
        assert float(run.data.params["rate"]) == pytest.approx(t.params["rate"])
        if PARENT_TRIAL in t.user_attrs:
            assert run.data.tags["hpsearch.parent_trial"] == str(t.user_attrs[PARENT_TRIAL])
            assert run.data.tags["hpsearch.from_epoch"] == str(t.user_attrs[FROM_EPOCH])
        else:
            assert "hpsearch.parent_trial" not in run.data.tags
    return study


def test_pbt_study_continues_from_the_right_checkpoints(run_dir, two_slot_client):
    api = Study(_pbt_spec("pbt-real"), run_dir=run_dir, client=two_slot_client)
    api.run(progress=False)
    study = check_pbt_study(run_dir, "pbt-real", n_trials=7)
    # The report draws the lineage and the best trial's schedule along its ancestors.
    files = {p.name for p in api.report()}
    assert {"lineage.png", "param_schedule.png"} <= files
    line = api.param_schedule()
    best = min((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert (
        line[-1].trial == best.number and PARENT_TRIAL not in study.trials[line[0].trial].user_attrs
    )
    assert line[0].first_epoch == 1 and line[-1].last_epoch == 6
    for before, after in itertools.pairwise(line):
        child = study.trials[after.trial]
        assert child.user_attrs[PARENT_TRIAL] == before.trial
        assert before.last_epoch == child.user_attrs[FROM_EPOCH] == after.first_epoch - 1
        assert after.params == child.params
    # 4 members; epoch 2: 2 replaced; epoch 4: the budget of 7 leaves room for 1.
    assert len(study.trials) == 7
    replaced = sorted(
        max(t.intermediate_values) for t in study.trials if t.state == TrialState.PRUNED
    )
    assert replaced == [2, 2, 4]


class _StopAtPause(Exception):
    pass


def test_a_coordinator_stopped_mid_generation_resumes_the_population(run_dir, two_slot_client):
    """The first coordinator stops as soon as a member has paused (as if it were killed): the
    paused member stays RUNNING at its interval. A second coordinator on the same storage
    rebuilds the population from the study: the paused member waits for its generation (it
    is not trained again), and the study ends as an uninterrupted one would."""
    name = "pbt-restart"
    spec = _pbt_spec(name)
    spec["search"]["max_concurrent"] = 1  # one member at a time: the stop finds one paused

    def stop(progress):
        if progress.last is not None and progress.last.state == "PAUSED":
            raise _StopAtPause

    with pytest.raises(_StopAtPause):
        Study(spec, run_dir=run_dir, client=two_slot_client).run(on_progress=stop)
    paused = [t for t in _study(run_dir, name).trials if t.user_attrs.get("hpsearch.paused_at")]
    assert len(paused) == 1 and paused[0].state == TrialState.RUNNING
    assert _steps(run_dir, name, paused[0].number) == [1, 2]
    Study(spec, run_dir=run_dir, client=two_slot_client).run(progress=False)
    study = check_pbt_study(run_dir, name, n_trials=7)
    assert len(study.trials) == 7, "the same budget as without the stop"
    assert sum(PARENT_TRIAL not in t.user_attrs for t in study.trials) == 4


@pytest.mark.slow
def test_data_parallel_pbt_copies_the_checkpoint_for_every_rank(run_dir, two_slot_client):
    """Trials of 2 ranks (gloo on CPU slots): the continuation's checkpoint is copied before
    its ranks start, and both ranks go on from its epoch."""
    name = "pbt-ddp"
    spec = _pbt_spec(name, n_trials=3, population=2)
    spec["objective"]["epochs"] = 4
    spec["objective"]["gpus_per_trial"] = 2
    Study(spec, run_dir=run_dir, client=two_slot_client).run(progress=False)
    study = check_pbt_study(run_dir, name, n_trials=3, population=2, ranks=2)
    assert len(study.trials) == 3


def test_a_continuation_keeps_the_optimizer_state_and_takes_its_own_parameters():
    import torch

    from hpsearch.training._objective import _apply_settings, _optimizer_settings

    class Trainer:
        def __init__(self, lr):
            self.model = torch.nn.Linear(3, 1)
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, weight_decay=0.01)

    parent = Trainer(0.1)
    parent.model(torch.ones(2, 3)).sum().backward()
    parent.optimizer.step()
    saved = parent.optimizer.state_dict()
    child = Trainer(0.05)
    settings = _optimizer_settings(child)
    child.optimizer.load_state_dict(saved)
    assert child.optimizer.param_groups[0]["lr"] == 0.1, "torch restores the parent's lr"
    _apply_settings(settings)
    assert child.optimizer.param_groups[0]["lr"] == 0.05, "the continuation's own lr"
    moments = [s["exp_avg"] for s in child.optimizer.state.values()]
    assert all(
        torch.equal(a, b["exp_avg"]) for a, b in zip(moments, saved["state"].values(), strict=True)
    )


@pytest.mark.slow
def test_a_builtin_cnn_continuation_starts_from_its_parents_epoch(run_dir, two_slot_client):
    """The digits CNN: a continuation's run holds its parent's metrics up to from_epoch (they
    come with the checkpoint) and its own after; its lr is its own."""
    name = "pbt-cnn"
    spec = {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": "digits",
            "metric": "val_accuracy",
            "direction": "maximize",
            "epochs": 3,
            "precision": "fp32",
            "params": {"batch_size": 128, "channels": 8},
            "checkpoint_interval": 0,
        },
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "search": {
            "n_trials": 3,
            "sampler": "random",
            "pruner": "none",
            "scheduler": "pbt",
            "pbt": {"population": 2, "interval_epochs": 1, "quantile": 0.5},
            "seed": 0,
        },
    }
    Study(spec, run_dir=run_dir, client=two_slot_client).run(progress=False)
    study = _study(run_dir, name)
    trials = study.trials
    assert len(trials) == 3 and not [t for t in trials if t.state == TrialState.RUNNING]
    (child,) = [t for t in trials if PARENT_TRIAL in t.user_attrs]
    parent = trials[child.user_attrs[PARENT_TRIAL]]
    epoch = child.user_attrs[FROM_EPOCH]
    assert child.state == TrialState.COMPLETE and sorted(child.intermediate_values) == [2, 3]
    assert child.params["lr"] != parent.params["lr"]
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", name)
    by_number = {int(r.data.tags.get("hpsearch.trial_number", -1)): r for r in runs}

    def history(number):
        metrics = client.get_metric_history(by_number[number].info.run_id, "val_loss")
        return {m.step: m.value for m in metrics}

    inherited = {s: v for s, v in history(child.number).items() if s <= epoch}
    assert inherited == {s: v for s, v in history(parent.number).items() if s <= epoch}
    assert set(history(child.number)) == {1, 2, 3}, "its own epochs after the inherited ones"
