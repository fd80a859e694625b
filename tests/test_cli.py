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


@pytest.mark.slow
def test_ctrl_c_stops_cleanly(tmp_path):
    study_file = tmp_path / "slow.yaml"
    study_file.write_text(GOOD.replace("staircase", "sleepy").replace("name: tiny", "name: slow"))
    proc = _hpsearch("run", str(study_file), cwd=tmp_path, start_new_session=True)
    journal = tmp_path / "runs" / "slow" / "optuna.journal"
    children: set[int] = set()
    deadline = time.monotonic() + 120
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    # Wait until trials are really running (they report once a second).
    while time.monotonic() < deadline:
        children |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        if journal.exists():
            try:
                study = optuna.load_study(
                    study_name="slow", storage=JournalStorage(JournalFileBackend(str(journal)))
                )
            except KeyError:  # the journal is there, the study not yet
                pass
            else:
                if sum(1 for t in study.trials if t.intermediate_values) >= 2:
                    break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the study never started")
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    assert "interrupted" in out
    time.sleep(1.0)
    assert not [
        pid
        for pid in children
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    study = optuna.load_study(
        study_name="slow", storage=JournalStorage(JournalFileBackend(str(journal)))
    )
    assert study.trials and all(t.state.is_finished() for t in study.trials)
    assert all(t.user_attrs.get("hpsearch.fail_reason") == "interrupted" for t in study.trials)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("slow")
    runs = client.search_runs([exp.experiment_id])
    assert runs and not [r for r in runs if r.info.status == "RUNNING"]


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
