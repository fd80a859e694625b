"""Schedulers that use checkpoints: the promotion rules of ASHA on fixed values, and real
studies on a 2-slot cluster where trials pause, free their set and resume."""

from __future__ import annotations

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.exceptions import SpecError
from hpsearch.search.schedulers import (
    BRACKET,
    DECISIONS,
    ESTIMATE,
    PAUSED_AT,
    AshaScheduler,
    cutoff,
    describe,
    promotable,
    rung_epochs,
)
from hpsearch.spec import StudySpec
from hpsearch.testing import user_spec
from tests.conftest import local_trials, mlflow_runs


def _asha(**kw):
    args = {"min_epochs": 1, "reduction_factor": 3, "brackets": 1, "max_epochs": 9}
    return AshaScheduler(**{**args, **kw}, maximize=False)


def test_rungs_and_cutoffs_by_hand():
    assert rung_epochs(1, 3, 9) == [1, 3]
    assert rung_epochs(1, 3, 27, bracket=1) == [3, 9]
    assert rung_epochs(2, 2, 16) == [2, 4, 8]
    values = {0: 0.5, 1: 0.2, 2: 0.9, 3: 0.3, 4: 0.1, 5: 0.7}
    assert promotable(values, set(), 3, maximize=False) == [4, 1]  # top 6 // 3 = 2
    assert promotable(values, {4}, 3, maximize=False) == [1]
    assert cutoff(values, 3, maximize=False) == 0.2
    assert cutoff({0: 1.0, 1: 2.0}, 3, maximize=False) is None
    assert promotable(values, set(), 2, maximize=True) == [2, 5, 0]


def test_promotion_order_matches_a_hand_computed_schedule():
    """Trials pause at epoch 1 with fixed values (minimize, eta 3); the scheduler is asked for
    work after each pause, as the coordinator does when a set is free."""
    s = _asha()
    order = []
    for number, value in enumerate([0.5, 0.4, 0.6, 0.3, 0.8, 0.9, 0.2]):
        s.paused(number, 100 + number, 1, value)
        job = s.next()
        order.append(None if job is None else (job.number, job.stop_at))
        if job is not None:  # a promoted trial runs to epoch 3 and pauses there
            s.paused(job.number, job.trial_id, 3, {1: 0.35, 3: 0.25, 6: 0.15}[job.number])
            job = s.next()
            order.append(None if job is None else (job.number, job.stop_at))
    # By hand (a rung promotes its top len // 3 at once, not waiting for it to fill):
    # trial 2 makes rung 0 hold 3: its top 1 is trial 1 (0.4) -> epoch 3; rung 1 holds 1.
    # Trial 3 (0.3): 4 // 3 = 1, the top is 3 -> epoch 3; rung 1 holds 2: no promotion.
    # Trials 4 and 5: the top 1 or 2 (3, then 3 and 1) are promoted already. Trial 6 (0.2):
    # the top 2 of 7 are 6 and 3 -> 6 goes to epoch 3; rung 1 then holds 3 trials, its top 1
    # is 6 (0.15) -> it runs to the last epoch (stop None).
    assert order == [None, None, (1, 3), None, (3, 3), None, None, None, (6, 3), (6, None)]
    ended = s.closing(asking=False)
    assert [e.number for e in ended] == [0, 1, 2, 3, 4, 5]
    reasons = {e.number: e.reason for e in ended}
    assert "rung 0 (epoch 1)" in reasons[0] and "cut-off 0.3" in reasons[0]
    assert "rung 1 (epoch 3)" in reasons[1] and "cut-off 0.15" in reasons[1]
    assert all(e.state == TrialState.PRUNED for e in ended)


def test_brackets_start_at_higher_rungs():
    s = _asha(brackets=2, max_epochs=27)
    assert s.stop_at(0) == 1 and s.stop_at(1) == 3
    s.paused(1, 11, 3, 0.1)
    assert s.next() is None, "bracket 1 holds one trial"


def test_a_trial_running_at_a_restart_that_reached_its_rung_can_still_be_promoted():
    """A trial that was running when its coordinator stopped, and reported its first rung
    before the new coordinator read the study, runs again to that rung (where it pauses
    again, training nothing); its value counts in the rung, and it can still be promoted.
    An ended trial and a paused one keep their places."""
    from optuna.distributions import FloatDistribution

    study = optuna.create_study()
    dist = {"x": FloatDistribution(0.0, 1.0)}
    ended = optuna.trial.create_trial(
        params={"x": 0.9}, distributions=dist, value=1.9, intermediate_values={1: 1.9, 3: 1.9}
    )
    study.add_trial(ended)
    for x, attrs in ((0.5, {PAUSED_AT: 1}), (0.1, {})):
        trial = study.ask(dist)
        trial.report(x + 1.0, 1)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
    s = _asha()
    again = s.restore(study.get_trials(deepcopy=False))
    assert [(j.number, j.stop_at) for j in again] == [(2, 1)], "trial 2 goes on to rung 0"
    assert s.brackets[0].values[0] == {0: 1.9, 1: 1.5, 2: 1.1}
    assert sorted(s.waiting) == [1]
    s.paused(2, again[0].trial_id, 1, 1.1)  # it pauses at its rung again
    job = s.next()
    assert job is not None and (job.number, job.stop_at) == (2, 3), "the best of rung 0 goes on"


def test_a_trial_sent_again_to_the_pause_it_reached_trains_nothing(tmp_path):
    """A coordinator stopped while a trial ran to its pause; the trial got there, and a new
    coordinator sends it again to the same pause. It pauses there at once (the value is its
    report), instead of training past the rung; promoted, it goes on from its checkpoint."""
    study, send = local_trials(tmp_path, StudySpec.from_dict(_asha_spec("sent-again")))
    trial = study.ask()
    first = send(trial, stop_at=1)
    assert (first.state, first.last_step) == ("PAUSED", 1)
    again = send(trial, resume=True, stop_at=1)
    assert (again.state, again.last_step, again.value) == ("PAUSED", 1, first.value)
    assert _steps(tmp_path, "sent-again", trial.number) == ["1"], "nothing trained again"
    promoted = send(trial, resume=True, stop_at=3)
    assert (promoted.state, promoted.last_step) == ("PAUSED", 3)
    assert _steps(tmp_path, "sent-again", trial.number) == ["1", "2", "3"]


def test_a_scheduler_with_a_pruner_is_one_line():
    spec = user_spec("x", "hpsearch.testing.objectives:rung_checkpointed", scheduler="asha")
    with pytest.raises(SpecError) as err:
        StudySpec.from_dict(spec)
    (line,) = err.value.problems
    assert line.startswith("<study>: search.pruner: search.scheduler asha")
    spec["search"].pop("pruner")
    assert StudySpec.from_dict(spec).search.pruner.name == "none"


def _asha_spec(name: str, n_trials: int = 7):
    spec = user_spec(name, "hpsearch.testing.objectives:rung_checkpointed", n_trials=n_trials)
    spec["objective"]["epochs"] = 9
    spec["search"].update(
        {
            "pruner": "none",
            "scheduler": "asha",
            # one bracket: the pauses and promotions these tests check by hand
            "asha": {"min_epochs": 1, "reduction_factor": 3, "brackets": 1},
        }
    )
    return spec


def _study(run_dir, name):
    return optuna.load_study(
        study_name=name,
        storage=JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal"))),
    )


def _steps(run_dir, name, number):
    path = run_dir / name / f"notes-{number}-rank0.txt"
    return path.read_text().split()[1::2] if path.exists() else []


def _check_asha_study(run_dir, name, n_trials):
    study = _study(run_dir, name)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == n_trials
    assert not [t for t in trials if t.state == TrialState.RUNNING], "nothing left RUNNING"
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert complete and pruned and len(complete) + len(pruned) == n_trials
    trained = 0
    for t in trials:
        steps = [int(s) for s in _steps(run_dir, name, t.number)]
        # Each epoch trained once: a paused trial resumed from its checkpoint.
        assert steps == list(range(1, len(steps) + 1)), (t.number, steps)
        trained += len(steps)
        if t.state == TrialState.PRUNED:
            reason = t.user_attrs["hpsearch.prune_reason"]
            assert "asha: paused at rung" in reason and "never promoted" in reason
            assert max(t.intermediate_values) in (1, 3)
    assert trained < n_trials * 9, "ASHA trains fewer epochs than every trial to the end"
    # The best at rung 0 (x smallest) always reaches the end.
    best = min(trials, key=lambda t: t.params["x"])
    assert best.state == TrialState.COMPLETE
    return study


def test_asha_study_pauses_promotes_and_ends_clean(run_dir, two_slot_client):
    Study(_asha_spec("asha-real"), run_dir=run_dir, client=two_slot_client).run()
    _check_asha_study(run_dir, "asha-real", 7)
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "asha-real")
    trial_runs = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert len(trial_runs) == 7, "one run per trial, reopened on each resume"
    assert all(r.info.status == "FINISHED" for r in trial_runs)
    for r in trial_runs:
        if r.data.tags["hpsearch.state"] == "PRUNED":
            assert "never promoted" in r.data.tags["hpsearch.prune_reason"]
            # as on every pruned run: the step it stopped at, and its value there
            assert r.data.tags["hpsearch.prune_step"] == r.data.tags["hpsearch.paused_at"]
            assert float(r.data.tags["hpsearch.prune_value"]) == pytest.approx(
                r.data.metrics["value"], rel=1e-6
            )


def test_brackets_auto_on_a_real_cluster_measures_and_tags_the_study_run(run_dir, two_slot_client):
    """The default, ``brackets: auto``: the first trials (a quarter of a study this small)
    train to the last epoch without pausing, later ones start at the rung the estimate picks;
    the estimate and the decisions are in the study and on its MLflow run."""
    spec = _asha_spec("asha-auto", n_trials=12)
    spec["search"]["asha"].pop("brackets")
    Study(spec, run_dir=run_dir, client=two_slot_client).run(progress=False)
    study = _study(run_dir, "asha-auto")
    brackets = [t.user_attrs[BRACKET] for t in study.trials]
    assert brackets.count(2) >= 3 and brackets.count(0) >= 6, brackets  # ladder 1, 3; 2: no pause
    estimate = study.user_attrs[ESTIMATE]
    assert estimate["trials"] >= 3 and len(estimate["rungs"]) == 2
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "asha-auto")
    (parent,) = [r for r in runs if "hpsearch.trial_number" not in r.data.tags]
    tags = parent.data.tags
    assert tags["hpsearch.asha.estimate"] == describe(estimate)
    assert tags["hpsearch.asha.decision.1"] == study.user_attrs[DECISIONS][0]


class _StopAtPause(Exception):
    pass


def test_a_coordinator_stopped_during_a_pause_loses_nothing(run_dir, two_slot_client):
    """The first coordinator stops as soon as a trial has paused (as if it were killed): the
    paused trial stays RUNNING in the study with its rung, holding no set. A second
    coordinator on the same storage does not rerun it: it waits at its rung, is promoted
    (from its checkpoint, no epoch trained twice) or ends PRUNED, and the budget is kept."""
    name = "asha-restart"
    spec = _asha_spec(name, n_trials=7)
    spec["search"]["max_concurrent"] = 1  # one trial at a time: the stop finds one paused

    def stop(progress):
        if progress.last is not None and progress.last.state == "PAUSED":
            raise _StopAtPause

    with pytest.raises(_StopAtPause):
        Study(spec, run_dir=run_dir, client=two_slot_client).run(on_progress=stop)
    before = _study(run_dir, name).trials
    paused = [t for t in before if t.user_attrs.get(PAUSED_AT)]
    # A trial submitted just before the stop may have begun its first step: a stop that is
    # not graceful (a kill) loses the step in progress, which trains again on the rerun.
    in_flight = {
        t.number
        for t in before
        if t.state == TrialState.RUNNING and not t.user_attrs.get(PAUSED_AT)
    }
    assert len(paused) == 1 and paused[0].state == TrialState.RUNNING
    assert paused[0].user_attrs[PAUSED_AT] == 1 and _steps(run_dir, name, paused[0].number) == ["1"]
    Study(spec, run_dir=run_dir, client=two_slot_client).run(progress=False)
    study = _study(run_dir, name)
    first = study.trials[paused[0].number]
    assert first.state in (TrialState.COMPLETE, TrialState.PRUNED)
    steps = _steps(run_dir, name, first.number)
    assert steps[0] == "1" and steps.count("1") == 1, "resumed from its rung, not retrained"
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert len(failed) <= 1, "only a trial in flight at the stop may have failed"
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    for t in study.trials:
        steps = [int(s) for s in _steps(run_dir, name, t.number)]
        if t.number in in_flight:  # its step in progress at the stop may have run twice
            assert sorted(set(steps)) == list(range(1, max(steps, default=0) + 1)), steps
            assert len(steps) <= len(set(steps)) + 1, (t.number, steps)
        elif t.state != TrialState.FAIL:
            assert steps == list(range(1, len(steps) + 1)), (t.number, steps)
        assert sorted(t.intermediate_values) == list(range(1, len(t.intermediate_values) + 1))
    assert len(study.trials) == 7, "the budget counts the paused trial once"
