"""The command line as a user meets it: exit codes, one-line errors, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from hpsearch.cli import app

ROOT = Path(__file__).resolve().parents[1]
USER_METRIC = "value"
GOOD = """\
name: tiny
objective: {model: "hpsearch.testing.objectives:staircase", direction: minimize}
space: {x: {type: float, low: 0.0, high: 1.0}}
search: {n_trials: 4, sampler: random, pruner: median}
cluster: {n_workers: 2}
"""

BAD = {
    "unknown-key": (
        "name: a\nobjective: {model: cnn}\nspace: {lr: {type: float, low: 0.1, high: 1}}\n"
        "serch: {}\n",
        ["serch", "did you mean 'search'"],
    ),
    "low-high": (
        "name: a\nobjective: {model: cnn}\nspace: {lr: {type: float, low: 0.1, high: 0.01}}\n",
        ["space.lr", "low"],
    ),
    "log-zero": (
        "name: a\nobjective: {model: cnn}\n"
        "space: {lr: {type: float, low: 0.0, high: 0.1, log: true}}\n",
        ["space.lr", "log"],
    ),
    "empty-choices": (
        "name: a\nobjective: {model: cnn}\nspace: {opt: {type: categorical, choices: []}}\n",
        ["space.opt", "choices"],
    ),
    "pruner": (
        "name: a\nobjective: {model: cnn}\nspace: {lr: {type: float, low: 0.1, high: 1}}\n"
        "search: {pruner: hyperbnd}\n",
        ["search.pruner", "hyperband"],
    ),
    "precision": (
        "name: a\nobjective: {model: cnn, precision: fp8}\n"
        "space: {lr: {type: float, low: 0.1, high: 1}}\n",
        ["objective.precision", "bf16"],
    ),
    "type": (
        "name: a\nobjective: {model: cnn, epochs: many}\n"
        "space: {lr: {type: float, low: 0.1, high: 1}}\n",
        ["objective.epochs", "many"],
    ),
    "import": (
        "name: a\nobjective: {model: 'no_such_module:objective'}\n",
        ["objective.model", "no_such_module"],
    ),
    "yaml": ("name: a\nobjective: {model: cnn\n  space: [\n", [":", "YAML"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_study_file_exits_2_with_one_line_and_creates_nothing(case, tmp_path):
    text, words = BAD[case]
    study_file = tmp_path / f"{case}.yaml"
    study_file.write_text(text)
    run_dir = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(study_file), "--run-dir", str(run_dir)])
    assert result.exit_code == 2, result.output
    out = result.output
    assert "Traceback" not in out
    assert str(study_file) in out
    for word in words:
        assert word in out, (word, out)
    assert not run_dir.exists(), "a bad file creates nothing"
    assert not (tmp_path / "mlflow.db").exists()


def test_missing_file(tmp_path):
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml: no such file" in result.output


def test_validate_prints_one_line_summary(tmp_path):
    study_file = tmp_path / "tiny.yaml"
    study_file.write_text(GOOD)
    result = CliRunner().invoke(app, ["validate", str(study_file)])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1
    assert "tiny" in result.output and "4 trials" in result.output


def test_the_renamed_scheduler_key_works_and_says_so(tmp_path):
    study_file = tmp_path / "old.yaml"
    study_file.write_text(GOOD.replace("{n_workers: 2}", "{n_workers: 2, scheduler: null}"))
    result = CliRunner().invoke(app, ["validate", str(study_file)])
    assert result.exit_code == 0, result.output
    assert f"note: {study_file}: cluster.scheduler is renamed cluster.address" in " ".join(
        result.output.split()
    )


def test_validate_every_shipped_study():
    for study_file in sorted((ROOT / "studies").glob("*.yaml")):
        result = CliRunner().invoke(app, ["validate", str(study_file)])
        assert result.exit_code == 0, (study_file, result.output)


def _hpsearch(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_run_command_end_to_end(tmp_path):
    study_file = tmp_path / "tiny.yaml"
    study_file.write_text(GOOD)
    proc = _hpsearch("run", str(study_file), "--n-trials", "3", cwd=tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert "optuna storage" in out and "journal://" in out
    assert f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}" in out
    assert "3 trials ended" in out
    assert (tmp_path / "runs" / "tiny" / "optuna.journal").exists()
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="tiny",
        storage=JournalStorage(
            JournalFileBackend(str(tmp_path / "runs" / "tiny" / "optuna.journal"))
        ),
    )
    assert len(study.trials) == 3


RESUMABLE = """\
name: resumable
objective: {model: "hpsearch.testing.objectives:checkpointed", direction: maximize}
space: {x: {type: float, low: 0.0, high: 1.0}}
search: {n_trials: 3, sampler: random, pruner: none}
cluster: {n_workers: 2}
"""


def _resumable_study(tmp_path: Path):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = tmp_path / "runs" / "resumable" / "optuna.journal"
    if not journal.exists():
        return None
    try:
        return optuna.load_study(
            study_name="resumable", storage=JournalStorage(JournalFileBackend(str(journal)))
        )
    except KeyError:  # the journal is there, the study not yet
        return None


def _start_and_wait(tmp_path: Path, study_file: Path, ready) -> tuple[subprocess.Popen, set[int]]:
    """Start ``hpsearch run`` in its own process group; return once ``ready(study)``."""
    proc = _hpsearch("run", str(study_file), cwd=tmp_path, start_new_session=True)
    children: set[int] = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the study ended before it was interrupted:\n{proc.stdout.read()}")
        children |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        study = _resumable_study(tmp_path)
        if study is not None and ready(study):
            return proc, children
        time.sleep(0.3)
    proc.kill()
    pytest.fail("the study never got to the point of the interruption")


def _gone(children: set[int]) -> bool:
    return not [
        pid
        for pid in children
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]


def _trial_runs(tmp_path: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resumable")
    runs = client.search_runs([exp.experiment_id])
    return client, [r for r in runs if "hpsearch.trial_number" in r.data.tags]


@pytest.mark.slow
def test_ctrl_c_leaves_trials_to_resume_and_a_rerun_finishes_the_budget(tmp_path):
    study_file = tmp_path / "resumable.yaml"
    study_file.write_text(RESUMABLE)

    from optuna.trial import TrialState

    # 1. Ctrl-C (to the whole process group, as a terminal sends it) once two trials have
    # checkpointed a few steps.
    proc, children = _start_and_wait(
        tmp_path,
        study_file,
        lambda s: (
            sum(t.state == TrialState.RUNNING and len(t.intermediate_values) >= 2 for t in s.trials)
            >= 2
        ),
    )
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    assert "resume" in out
    time.sleep(1.0)
    assert _gone(children), "the cluster and its processes are stopped"

    study = _resumable_study(tmp_path)
    waiting = [t for t in study.trials if t.state == TrialState.RUNNING]
    assert len(waiting) >= 2
    assert not [t for t in study.trials if t.state == TrialState.FAIL], "nothing FAIL"
    assert all(t.user_attrs.get("hpsearch.interrupted") is True for t in waiting)
    assert all(t.user_attrs.get("hpsearch.interruptions") == 1 for t in waiting)
    client, runs = _trial_runs(tmp_path)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    interrupted = {
        int(r.data.tags["hpsearch.trial_number"]): r
        for r in runs
        if r.data.tags.get("hpsearch.interrupted") == "true"
    }
    assert {t.number for t in waiting} >= set(interrupted) and len(interrupted) >= 2
    assert all(r.info.status == "KILLED" for r in interrupted.values())

    # 2. Run again, and press Ctrl-C twice once the resumed trials went on: the second one
    # stops the process at once.
    steps_before = {t.number: len(t.intermediate_values) for t in waiting}
    proc, children = _start_and_wait(
        tmp_path,
        study_file,
        lambda s: any(
            len(t.intermediate_values) > steps_before.get(t.number, 99) for t in s.trials
        ),
    )
    os.killpg(proc.pid, signal.SIGINT)
    # Two signals that arrive before the first one's handler runs are one (a loaded machine
    # can hold the handler back longer than a key press takes): the second Ctrl-C goes once
    # the first one is seen.
    said = []
    for line in proc.stdout:
        said.append(line)
        if "interrupting:" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    out = "".join(said) + rest
    assert proc.returncode == 130, out
    assert "stopped at once" in out
    deadline = time.monotonic() + 60
    while not _gone(children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _gone(children), "the workers follow their coordinator out"

    # 3. The last run finishes the budget: exactly n_trials ended, no duplicate, each
    # interrupted trial went on from its checkpoint, every MLflow run closed.
    proc = _hpsearch("run", str(study_file), cwd=tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "3 trials ended" in out
    study = _resumable_study(tmp_path)
    assert [t.number for t in study.trials] == [0, 1, 2]
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert all(sorted(t.intermediate_values) == list(range(8)) for t in study.trials)
    assert not [t for t in study.trials if t.user_attrs.get("hpsearch.interrupted")]
    folder = tmp_path / "runs" / "resumable"
    for number in interrupted:
        noted = (folder / f"notes-{number}-rank0.txt").read_text().split("\n")
        # Started once from step 0; each later start went on after its last checkpoint.
        assert noted.count("step 0") == 1, noted
        assert {f"step {i}" for i in range(8)} <= set(noted)
    client, runs = _trial_runs(tmp_path)
    assert sorted(int(r.data.tags["hpsearch.trial_number"]) for r in runs) == [0, 1, 2]
    assert all(r.info.status == "FINISHED" for r in runs)
    for run in runs:
        history = client.get_metric_history(run.info.run_id, USER_METRIC)
        assert sorted(m.step for m in history) == list(range(8)), "every step once"
        if int(run.data.tags["hpsearch.trial_number"]) in interrupted:
            assert (
                run.info.run_id
                == interrupted[int(run.data.tags["hpsearch.trial_number"])].info.run_id
            )
            assert "hpsearch.interrupted" not in run.data.tags
            assert int(run.data.tags["hpsearch.attempt"]) >= 2


def test_an_unreachable_tracking_server_is_one_line_at_start(tmp_path):
    study_file = tmp_path / "tiny.yaml"
    study_file.write_text(GOOD)
    proc = _hpsearch("run", str(study_file), "--mlflow-uri", "http://127.0.0.1:9", cwd=tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines == [
        "error: MLflow tracking server http://127.0.0.1:9 is unreachable: "
        "[Errno 111] Connection refused"
    ], out
    assert not (tmp_path / "runs").exists(), "nothing half-written"
