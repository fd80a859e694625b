"""Studies that change: a study run again from an edited file (free, carried and breaking
changes), and a study started from earlier ones (search.warm_start)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.search._carry import SPEC_ATTR, TRANSFERRED, VERSION_ATTR, changes
from hpsearch.search._warm_start import open_source
from hpsearch.spec import StudySpec
from hpsearch.spec._changes import compare
from hpsearch.storage import open_storage
from hpsearch.testing import user_spec

from .conftest import mlflow_runs

STAIRCASE = "hpsearch.testing.objectives:staircase"


def _study(run_dir, name):
    url = f"journal://{run_dir / name / 'optuna.journal'}"
    return optuna.load_study(study_name=name, storage=open_storage(url))


def test_a_carried_range_change_keeps_the_trials_and_samples_from_the_valid_ones(
    run_dir, dask_client, caplog
):
    spec = user_spec("edit", STAIRCASE, n_trials=6, pruner="none")
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    spec["space"]["x"]["high"] = 0.5
    spec["search"]["n_trials"] = 10
    edited = Study(spec, run_dir=run_dir, client=dask_client)
    assert {(c.field, c.kind) for c in edited.changes()} == {
        ("space.x", "carried"),
        ("search.n_trials", "free"),
    }
    with caplog.at_level(logging.WARNING, logger="hpsearch.study"):
        edited.run(progress=False)
    study = _study(run_dir, "edit")
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 10 and all(t.state == TrialState.COMPLETE for t in trials)
    assert [t.user_attrs[VERSION_ATTR] for t in trials] == [1] * 6 + [2] * 4
    assert all(t.params["x"] <= 0.5 for t in trials[6:])
    valid = sum(t.params["x"] <= 0.5 for t in trials[:6])
    assert f"the sampler learns from {valid} of the 6 earlier completed trials" in caplog.text
    assert json.loads(study.user_attrs[SPEC_ATTR])["space"]["x"]["high"] == 0.5
    # The sampler's view: the valid earlier trials, with the new distribution.
    from hpsearch.search._carry import Carry
    from hpsearch.search._space import to_distributions

    carry = Carry(to_distributions(edited.spec.space))
    seen = carry.visible(trials, None)
    assert len(seen) == valid + 4
    assert all(t.distributions["x"].high == 0.5 for t in seen)
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "edit")
    versions = sorted(
        r.data.tags.get("hpsearch.spec_version")
        for r in runs
        if "hpsearch.trial_number" in r.data.tags
    )
    assert versions == ["1"] * 6 + ["2"] * 4


class _NoRun:
    """The trial's MLflow run, not looked at here."""

    def log_metrics(self, *args, **kwargs):
        pass


def _run_trials(study, spec, n):
    """``n`` trials of ``spec``'s objective as a worker runs them: asked with the file's space
    (as the coordinator asks), the objective given hpsearch's trial."""
    from hpsearch.search._space import to_distributions
    from hpsearch.testing.objectives import staircase
    from hpsearch.trial._tracked import TrackedTrial

    for _ in range(n):
        asked = study.ask(to_distributions(spec.space))
        trial = TrackedTrial(
            study, asked._trial_id, run=_NoRun(), metric="value", pruner_name="none"
        )
        value = staircase(trial)
        trial.flush_reports()
        study.tell(asked, value)


def test_a_range_narrowed_in_the_file_wins_over_the_objectives_said_once_in_hpsearchs_words(
    tmp_path, caplog
):
    """The file narrows x to [0, 0.5] while the objective still suggests x in [0, 1]: every
    trial takes the file's range, hpsearch says so once, and no Optuna warning gets out."""
    from hpsearch.search._carry import changes, record_spec

    study = optuna.create_study(
        study_name="narrowed",
        storage=open_storage(f"journal://{tmp_path / 'optuna.journal'}"),
        pruner=optuna.pruners.NopPruner(),
    )
    spec = user_spec("narrowed", STAIRCASE, n_trials=2, pruner="none")
    first = StudySpec.from_dict(spec)
    record_spec(first, study, [])
    _run_trials(study, first, 2)  # the file and the objective agree: nothing to say
    spec["space"]["x"]["high"] = 0.5
    edited = StudySpec.from_dict(spec)
    found = changes(edited, study)
    assert [(c.field, c.kind) for c in found] == [("space.x", "carried")]
    record_spec(edited, study, found)

    # What Optuna alone does with it: the trial keeps the file's range, and warns.
    from hpsearch.search._space import to_distributions

    plain = study.ask(to_distributions(edited.space))
    with pytest.warns(RuntimeWarning, match='Inconsistent parameter values .* name "x"'):
        plain.suggest_float("x", 0.0, 1.0)
    study.tell(plain, state=TrialState.FAIL)

    with (
        warnings.catch_warnings(record=True) as caught,
        caplog.at_level(logging.WARNING, logger="hpsearch.trial"),
    ):
        warnings.simplefilter("always")  # a warning given before is shown again
        _run_trials(study, edited, 4)
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == [], [
        str(w.message) for w in caught
    ]
    said = [r.getMessage() for r in caplog.records if r.name.startswith("hpsearch.trial")]
    assert said == [
        "study 'narrowed', parameter 'x': the study file's range [0, 0.5] is searched, not the "
        "objective's suggest_float range [0, 1] (the file's space wins)"
    ]
    trials = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 6 and all(t.params["x"] <= 0.5 for t in trials[2:])
    assert all(t.distributions["x"].high == 0.5 for t in trials[2:])

    # Outside hpsearch's suggest (and for a range the objective repeats inconsistently within
    # one trial), Optuna's warning is left as it is.
    with pytest.warns(RuntimeWarning, match="Inconsistent parameter values"):
        again = study.ask()
        again.suggest_float("y", 0.0, 1.0)
        again.suggest_float("y", 0.0, 2.0)


def test_a_free_change_keeps_the_spec_version(run_dir, dask_client):
    spec = user_spec("free", STAIRCASE, n_trials=2)
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    spec["search"]["n_trials"] = 3
    spec["search"]["max_retries"] = 4
    again = Study(spec, run_dir=run_dir, client=dask_client)
    assert {(c.field, c.kind) for c in again.changes()} == {
        ("search.n_trials", "free"),
        ("search.max_retries", "free"),
    }
    again.run(progress=False)
    study = _study(run_dir, "free")
    assert study.user_attrs[VERSION_ATTR] == 1
    assert [t.user_attrs[VERSION_ATTR] for t in study.trials] == [1, 1, 1]


def test_the_direction_flip_is_refused_and_nothing_is_written(run_dir, dask_client):
    spec = user_spec("flip", STAIRCASE, n_trials=2)
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    spec["objective"]["direction"] = "maximize"
    spec["search"]["n_trials"] = 4
    path = run_dir / "flip.yaml"
    path.write_text(yaml.safe_dump(spec))
    journal = run_dir / "flip" / "optuna.journal"
    before = (journal.read_bytes(), (run_dir / "flip" / "study.yaml").read_text())
    expected = (
        f"error: {path}: objective.direction: minimize -> maximize: the earlier values mean "
        "something else; the study 'flip' cannot carry it: give the study a new name, or start "
        "a new one from this one (search.warm_start: {from: flip})"
    )
    for command in ("run", "validate"):
        out = subprocess.run(
            [sys.executable, "-m", "hpsearch.cli", command, str(path), "--run-dir", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert expected in out.stderr.replace("\n", " ").replace("  ", " "), out.stderr
    assert (journal.read_bytes(), (run_dir / "flip" / "study.yaml").read_text()) == before


def test_what_history_cannot_carry_is_breaking():
    old = {
        "objective": {"metric": "value", "epochs": 4, "dataset": "digits"},
        "space": {
            "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
            "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
        },
        "search": {"pruner": "median", "sampler": "tpe"},
    }
    new = {
        "objective": {"metric": "value", "epochs": 6, "dataset": "digits"},
        "space": {
            "opt": {"type": "categorical", "choices": ["adam", "sgd", "rmsprop"]},
            "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": False},
        },
        "search": {"pruner": "median", "sampler": "random"},
    }
    found = {c.field: (c.kind, c.why) for c in compare(old, new)}
    assert found == {
        "objective.epochs": (
            "breaking",
            "the pruner or scheduler compares trials at each epoch",
        ),
        "space.lr": ("breaking", "a parameter's log scale cannot change"),
        "space.opt": ("breaking", "Optuna keeps one list of choices per parameter in a study"),
        "search.sampler": ("carried", ""),
    }


def test_warm_start_enqueues_the_best_configurations_mapped_onto_the_new_space(
    run_dir, dask_client, caplog
):
    Study(
        user_spec("source", STAIRCASE, n_trials=6, pruner="none"),
        run_dir=run_dir,
        client=dask_client,
    ).run(progress=False)
    best = sorted(t.params["x"] for t in _study(run_dir, "source").trials)[:3]
    spec = user_spec("warm", STAIRCASE, n_trials=4, pruner="none")
    spec["space"]["x"] = {"type": "float", "low": 0.2, "high": 0.9}
    start = {"from": "source", "top_k": 3, "history": False}
    with caplog.at_level(logging.WARNING, logger="hpsearch.study"):  # the Python API's way
        result = Study(spec, run_dir=run_dir, client=dask_client, warm_start=start).run(
            progress=False
        )
    spec["search"]["warm_start"] = start  # the file's way: the same spec
    trials = _study(run_dir, "warm").trials
    assert len(trials) == 4
    assert [t.params["x"] for t in trials[:3]] == pytest.approx([max(0.2, x) for x in best])
    assert all(t.user_attrs[TRANSFERRED].startswith("source#") for t in trials[:3])
    assert TRANSFERRED not in trials[3].user_attrs
    clipped = sum(x < 0.2 for x in best)
    assert "warm start: the best 3 of source run first" in caplog.text
    assert (f"x clipped in {clipped}" in caplog.text) == bool(clipped)
    # The run ends saying how they ranked, and the study's MLflow run keeps the line.
    from mlflow import MlflowClient

    assert (
        len(result.notes) == 1 and "configurations from earlier studies ranked" in result.notes[0]
    )
    parent = MlflowClient(result.mlflow_uri).get_run(result.parent_run_id)
    assert parent.data.tags["hpsearch.warm_start_outcome"] == result.notes[0]
    # Run again: the warm start is not enqueued twice.
    spec["search"]["n_trials"] = 5
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    assert sum(TRANSFERRED in t.user_attrs for t in _study(run_dir, "warm").trials) == 3
    # The report shows them in their own colour.
    legend = Study(spec, run_dir=run_dir).plot_history().axes[0].get_legend()
    assert "from an earlier study (warm start)" in [t.get_text() for t in legend.get_texts()]


def _sim(name, **search):
    return {
        "name": name,
        "objective": {"model": "synthetic", "epochs": 9},
        "search": {"n_trials": 40, "sampler": "random", "seed": 1, **search},
        "cluster": {"backend": "simulated", "simulated": {"workers": 4}},
    }


def test_history_informs_the_sampler_and_is_never_counted_or_best(run_dir):
    Study(_sim("old"), run_dir=run_dir).run(progress=False)
    spec = _sim(
        "new", sampler="tpe", n_trials=6, warm_start={"from": "old", "top_k": 0, "history": True}
    )
    result = Study(spec, run_dir=run_dir).run(progress=False)
    study = _study(run_dir, "new")
    assert len(study.trials) == 6 and result.progress.ended == 6
    assert result.best is not None and result.best.number in range(6)
    assert all(TRANSFERRED not in t.user_attrs for t in study.trials)
    old = _study(run_dir, "old")
    # TPE models from the first trial on (40 transferred trials are past its startup trials):
    # its samples sit near the old study's good region, not spread as random ones.
    good = sorted(old.trials, key=lambda t: -t.value)[:8]
    lo, hi = min(t.params["x"] for t in good), max(t.params["x"] for t in good)
    inside = sum(lo - 0.1 <= t.params["x"] <= hi + 0.1 for t in study.trials)
    assert inside >= 4, [t.params["x"] for t in study.trials]


def test_a_warm_run_ends_saying_how_its_transferred_configurations_ranked(run_dir):
    Study(_sim("old"), run_dir=run_dir).run(progress=False)
    spec = _sim("new", n_trials=8, warm_start={"from": "old", "top_k": 3, "history": False})
    result = Study(spec, run_dir=run_dir).run(progress=False)
    complete = [t for t in _study(run_dir, "new").trials if t.state == TrialState.COMPLETE]
    order = sorted(complete, key=lambda t: (-t.value, t.number))
    ranks = sorted(i + 1 for i, t in enumerate(order) if TRANSFERRED in t.user_attrs)
    assert len(ranks) == 3, "the three transferred configurations completed"
    assert result.notes == [
        f"warm start: the 3 configurations from earlier studies ranked {ranks[0]}, {ranks[1]} "
        f"and {ranks[2]} of the {len(complete)} completed trials here"
        + (
            ": all in the worse half, the earlier studies' best is not this study's"
            if ranks[0] > len(complete) / 2
            else ""
        )
    ]
    # hpsearch status says it again, later.
    from rich.console import Console

    from hpsearch.cli._views import _status_view

    console = Console(width=400, record=True)
    console.print(_status_view(Study.load(run_dir / "new")))
    assert result.notes[0] in console.export_text()
    # A cold run has nothing to say.
    assert Study(_sim("cold", n_trials=4), run_dir=run_dir).run(progress=False).notes == []


def test_transferred_configurations_all_in_the_worse_half_are_called_out():
    from hpsearch.search._warm_start import outcome

    study = optuna.create_study(direction="minimize")
    for value, moved in [(5.0, True), (1.0, False), (2.0, False), (4.0, True), (3.0, False)]:
        study.enqueue_trial({"x": value}, user_attrs={TRANSFERRED: "old#1"} if moved else {})
        study.optimize(lambda t: t.suggest_float("x", 0, 9), n_trials=1)
    assert outcome(study) == (
        "warm start: the 2 configurations from earlier studies ranked 4 and 5 of the 5 completed"
        " trials here: all in the worse half, the earlier studies' best is not this study's"
    )
    failed = study.ask({"x": optuna.distributions.FloatDistribution(0, 9)})
    failed.set_user_attr(TRANSFERRED, "old#2")
    study.tell(failed, state=TrialState.FAIL)
    assert "of the 5 completed trials here (1 pruned or failed)" in str(outcome(study))
    running = study.ask({"x": optuna.distributions.FloatDistribution(0, 9)})
    running.set_user_attr(TRANSFERRED, "old#3")
    assert "(1 pruned or failed, 1 running)" in str(outcome(study))
    # While none of them has ended, there is nothing to say.
    fresh = optuna.create_study()
    fresh.enqueue_trial({"x": 1.0}, user_attrs={TRANSFERRED: "old#1"})
    fresh.ask({"x": optuna.distributions.FloatDistribution(0, 9)})
    assert outcome(fresh) is None


def test_a_warm_start_from_a_study_that_never_ran_writes_nothing(run_dir):
    from hpsearch.exceptions import SpecError
    from hpsearch.search._warm_start import check_sources

    with pytest.raises(SpecError) as info:
        Study(_sim("lost", warm_start="nosuch"), run_dir=run_dir).run(progress=False)
    assert info.value.problems == [
        f"<study>: search.warm_start: no study 'nosuch' (no {run_dir / 'nosuch' / 'study.yaml'}: "
        "has it run?)"
    ]
    assert not (run_dir / "lost").exists()
    # A database that cannot be opened: one line too, not the driver's traceback.
    url = f"sqlite:///{run_dir / 'no-such-folder' / 'x.db'}"
    with pytest.raises(SpecError) as info:
        Study(_sim("lost", warm_start=url), run_dir=run_dir).run(progress=False)
    assert info.value.problems == [
        f"<study>: search.warm_start: Optuna storage {url}: cannot open it "
        "(unable to open database file)"
    ]
    assert not (run_dir / "lost").exists()
    # Once it has run, hpsearch validate says what it holds.
    Study(_sim("nosuch", n_trials=3), run_dir=run_dir).run(progress=False)
    spec = StudySpec.from_dict(_sim("lost", warm_start="nosuch"))
    n = sum(t.state == TrialState.COMPLETE for t in _study(run_dir, "nosuch").trials)
    assert check_sources(spec, run_dir) == [
        f"search.warm_start: from nosuch ({n} completed trials)"
    ]


def test_a_warm_start_across_directions_is_refused(run_dir):
    from hpsearch.exceptions import SpecError

    Study(_sim("up"), run_dir=run_dir).run(progress=False)
    spec = _sim("down", warm_start="up")
    spec["objective"]["direction"] = "minimize"
    with pytest.raises(SpecError) as info:
        Study(spec, run_dir=run_dir).run(progress=False)
    assert info.value.problems == [
        "<study>: search.warm_start: up optimizes val_accuracy (maximize), this study "
        "val_accuracy (minimize): its values cannot inform this one"
    ]


def test_warm_start_from_a_study_in_postgresql_into_a_journal(run_dir):
    import uuid

    from .test_scale_out import _admin  # skips where there is no PostgreSQL

    name = f"hps_{uuid.uuid4().hex[:10]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        Study({**_sim("pg-source"), "storage": url}, run_dir=run_dir).run(progress=False)
        spec = _sim("from-pg", n_trials=5, warm_start={"from": url, "top_k": 2, "history": True})
        Study(spec, run_dir=run_dir).run(progress=False)
        trials = _study(run_dir, "from-pg").trials
        assert len(trials) == 5
        assert [t.user_attrs.get(TRANSFERRED, "").split("#")[0] for t in trials[:2]] == [
            f"pg-source ({url})"
        ] * 2
    finally:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_check_says_what_changed_and_what_each_source_holds_and_the_run_does_not_again(
    run_dir, dask_client, monkeypatch
):
    from typer.testing import CliRunner

    from hpsearch.cli import app
    from hpsearch.search import _start, _warm_start

    Study(
        user_spec("src", STAIRCASE, n_trials=3, pruner="none"), run_dir=run_dir, client=dask_client
    ).run(progress=False)
    spec = user_spec("checked", STAIRCASE, n_trials=2, pruner="none")
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    spec["search"]["n_trials"] = 4
    spec["space"]["x"]["high"] = 0.5
    spec["search"]["warm_start"] = {"from": "src", "top_k": 1, "history": False}
    path = run_dir / "checked.yaml"
    path.write_text(yaml.safe_dump(spec))
    journal = run_dir / "checked" / "optuna.journal"
    before = journal.read_bytes()
    compared, opened = [], []
    monkeypatch.setattr(_start, "changes", lambda *a: compared.append(1) or changes(*a))
    monkeypatch.setattr(_warm_start, "open_source", lambda *a: opened.append(1) or open_source(*a))

    study = Study.from_yaml(path, run_dir=run_dir, client=dask_client)
    lines = study.check()
    assert lines == [
        f"{path}: search.n_trials: 2 -> 4 (free)",
        f"{path}: search.warm_start: (none) -> [{{from: src, top_k: 1, history: False}}] "
        "(carried: the earlier trials are kept)",
        f"{path}: space.x: {{high: 1.0, log: False, low: 0.0, step: (none), type: float}} -> "
        "{type: float, low: 0.0, high: 0.5, log: False, step: (none)} "
        "(carried: the earlier trials are kept)",
        "search.warm_start: from src (3 completed trials)",
    ]
    assert journal.read_bytes() == before, "checking writes nothing"
    assert (compared, opened) == ([1], [1])
    # hpsearch validate prints the same lines after its summary.
    out = CliRunner().invoke(app, ["validate", str(path), "--run-dir", str(run_dir)])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[1:] == lines
    # The run starts from what check() found: the spec is not compared nor the source opened
    # again.
    compared.clear(), opened.clear()
    study.run(progress=False)
    assert (compared, opened) == ([], [])
    trials = _study(run_dir, "checked").trials
    assert [t.user_attrs[VERSION_ATTR] for t in trials] == [1, 1, 2, 2]
    assert trials[2].user_attrs[TRANSFERRED].startswith("src#")
    # A run without check() checks once.
    spec["search"]["n_trials"] = 5
    Study(spec, run_dir=run_dir, client=dask_client).run(progress=False)
    assert (compared, opened) == ([1], [1])
