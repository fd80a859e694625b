"""The views people look at: the Python API read-back, the CLI views, plots, the MLflow UI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from hpsearch import Study
from hpsearch.testing import cnn_spec

from .conftest import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory, one_slot_cluster):
    """A small finished CNN study (6 trials, some pruned), shared by the tests of this file."""
    run_dir = tmp_path_factory.mktemp("views") / "runs"
    spec = cnn_spec("views", n_trials=6, epochs=3)
    study = Study(spec, run_dir=run_dir, client=one_slot_cluster.get())
    result = study.run()
    return study, result, run_dir


def _cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "hpsearch.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_api_round_trip(finished):
    study, result, run_dir = finished
    best = study.best_trial
    assert best.number == result.best.number and best.value == result.best.value
    assert best.params == result.best.params and best.run_id
    frame = study.trials_dataframe()
    assert list(frame["number"]) == list(range(6))
    assert set(frame["state"]) <= {"COMPLETE", "PRUNED"}
    for col in (
        "value",
        "duration_s",
        "worker",
        "devices",
        "run_id",
        "params_lr",
        "params_channels",
    ):
        assert col in frame.columns, col
    assert frame["run_id"].notna().all() and frame["worker"].str.startswith("tcp://").all()
    again = Study.load(run_dir / "views")
    assert again.best_trial == best, "re-opened from its run folder"
    assert again.trials_dataframe()["value"].equals(frame["value"])


def test_trials_table_has_layout_throughput_and_memory_per_rank(finished):
    from hpsearch.study._analysis import trials_dataframe

    study, _, _ = finished
    frame = study.trials_dataframe()
    runs = study._runs()
    for row in frame.itertuples():
        metrics = runs[row.number].data.metrics
        peaks = [v for k, v in metrics.items() if k.startswith("peak_rss_bytes_rank")]
        assert row.param_bytes_per_rank == metrics["param_bytes_per_rank"] > 0
        assert row.peak_rss_bytes_per_rank == max(peaks) > row.param_bytes_per_rank
        # parameters, their gradients, Adam's two moments (and its step counters)
        assert 0 <= row.train_state_bytes_per_rank - 4 * row.param_bytes_per_rank <= 1024
        assert row.parallel == "ddp" and row.samples_per_s > 0
    columns = list(frame.columns)
    assert "cuda_max_allocated_bytes_per_rank" not in columns, "a CPU study"
    assert columns.index("peak_rss_bytes_per_rank") < columns.index("params_lr")
    bare = trials_dataframe(study.optuna_study())  # no runs: no run columns
    assert not {"parallel", "samples_per_s", "param_bytes_per_rank"} & set(bare.columns)


def test_plots_are_real_images(finished, tmp_path):
    study, _, _ = finished
    for name in (
        "plot_history",
        "plot_intermediate_values",
        "plot_importances",
        "plot_parallel_coordinate",
    ):
        fig = getattr(study, name)()
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        assert path.stat().st_size > 5000, name
        ax = fig.axes[0]
        assert ax.get_title(), name
        assert ax.lines or ax.collections or ax.patches, f"{name} draws something"


def test_report_writes_files_and_logs_them_on_the_study_run(finished):
    study, result, run_dir = finished
    files = study.report()
    names = {f.name for f in files}
    assert names == {
        "history.png",
        "intermediate_values.png",
        "importances.png",
        "parallel_coordinate.png",
        "report.html",
    }
    assert all(f.stat().st_size > 5000 for f in files)
    html = (run_dir / "views" / "report" / "report.html").read_text()
    assert "plotly" in html.lower() and "Optimization history" in html
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=result.mlflow_uri)
    logged = {a.path for a in client.list_artifacts(result.parent_run_id, "report")}
    assert {f"report/{n}" for n in names} <= logged


def test_cli_best_and_status(finished, tmp_path):
    study, result, run_dir = finished
    out = _cli("best", str(run_dir / "views"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)
    assert best["number"] == result.best.number and best["value"] == pytest.approx(
        result.best.value
    )
    assert best["params"] == result.best.params and best["run_id"] == study.best_trial.run_id
    assert best["metric"] == "val_accuracy" and best["direction"] == "maximize"
    out = _cli("best", str(run_dir / "views"), cwd=tmp_path)
    assert out.returncode == 0 and f"best trial #{result.best.number}" in out.stdout
    out = _cli("status", str(run_dir / "views"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "6/6 ended" in out.stdout and "no trial running" in out.stdout
    assert f"(#{result.best.number})" in out.stdout


def test_cli_views_of_a_study_that_has_not_run(tmp_path):
    out = _cli("best", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "error:" in out.stderr and "Traceback" not in out.stderr


def test_cli_ui_serves_the_study_and_stops_cleanly(finished, tmp_path):
    _study, result, run_dir = finished
    port = free_port()
    env = {**os.environ}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpsearch.cli", "ui", str(run_dir / "views"), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the MLflow UI did not answer")
                time.sleep(0.5)
        # What a user browsing the experiment sees, through the UI's own REST API.
        exp = json.load(
            urllib.request.urlopen(
                f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=views"
            )
        )
        body = json.dumps(
            {"experiment_ids": [exp["experiment"]["experiment_id"]], "max_results": 100}
        ).encode()
        req = urllib.request.Request(
            f"{base}/api/2.0/mlflow/runs/search",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        runs = json.load(urllib.request.urlopen(req))["runs"]
        tags = [{t["key"]: t["value"] for t in r["data"]["tags"]} for r in runs]
        parent = [t for t in tags if t.get("hpsearch.role") == "study"]
        children = [t for t in tags if "hpsearch.trial_number" in t]
        assert len(parent) == 1 and len(children) == 6
        assert all(t["mlflow.parentRunId"] == result.parent_run_id for t in children), (
            "trials nested under the study"
        )
        assert all(
            t["mlflow.runName"] == f"trial-{t['hpsearch.trial_number']} {t['hpsearch.state']}"
            for t in children
        )
        assert all(
            "hpsearch.prune_reason" in t for t in children if t["hpsearch.state"] == "PRUNED"
        )
        assert parent[0]["hpsearch.best_trial"] == str(result.best.number)
        # Optuna's dashboard on the study's own storage, on the next port.
        dashboard = f"http://127.0.0.1:{port + 1}"
        studies = None
        while studies is None:
            try:
                studies = json.load(urllib.request.urlopen(f"{dashboard}/api/studies", timeout=5))
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the Optuna dashboard did not answer")
                time.sleep(0.5)
        (summary,) = studies["study_summaries"]
        assert summary["study_name"] == "views"
        if shutil.which("chromium"):
            _browse(
                f"{base}/#/experiments/{exp['experiment']['experiment_id']}/runs",
                tmp_path,
                expect=["views", "7 matching runs"],
            )
            _browse(f"{dashboard}/dashboard", tmp_path, expect=["views"], screenshot=False)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # Say who still holds the output open: hpsearch ui itself, or a server it started.
            holders = [
                " ".join(p.info["cmdline"])[:120]
                for p in psutil.process_iter(["cmdline"])
                if str(port) in " ".join(p.info["cmdline"] or [])
            ]
            proc.kill()
            pytest.fail(f"hpsearch ui exit code {proc.poll()}; still running: {holders}")
    assert f"http://127.0.0.1:{port}" in out
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/health", timeout=2)


def _browse(url: str, folder: Path, *, expect: list[str], screenshot: bool = True) -> None:
    """Load ``url`` in headless Chromium; its rendered page must show ``expect`` (with
    ``screenshot``, one is left in ``folder`` for a person to look at)."""
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--window-size=1400,900",
        "--virtual-time-budget=20000",
    ]
    if screenshot:
        shot = subprocess.run(
            [
                "chromium",
                *flags,
                f"--user-data-dir={folder / 'chromium-1'}",
                f"--screenshot={folder / 'ui.png'}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (folder / "ui.png").stat().st_size > 20000, shot.stderr[-2000:]
    dom = subprocess.run(
        ["chromium", *flags, f"--user-data-dir={folder / 'chromium-2'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    import re

    text_of_page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", dom))
    for text in expect:
        assert text in text_of_page, f"the runs page shows {text!r}"


NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_every_notebook_is_committed_clean_and_its_code_parses() -> None:
    """Cheap checks of every notebook (``benchmarks/scenarios`` runs them all, in order):
    valid, no outputs committed, each code cell Python (an IPython magic aside)."""
    import ast

    import nbformat

    assert [p.stem for p in NOTEBOOKS] == ["01-quickstart", "02-analysis", "03-own-model"]
    for path in NOTEBOOKS:
        book = nbformat.read(path, as_version=4)
        nbformat.validate(book)
        for cell in book.cells:
            if cell.cell_type == "code":
                assert not cell.get("outputs"), f"{path.name}: committed with outputs"
                code = "\n".join(
                    line for line in cell.source.splitlines() if not line.startswith("%")
                )
                ast.parse(code, filename=path.name)


# The notebooks are executed by the documentation's build (tests/test_docs.py builds the site,
# a notebook that raises fails it), which renders them with their outputs; the long scenarios
# run them all in one folder, in order, with execute_notebook.


def execute_notebook(path: Path, tmp_path: Path, monkeypatch, runs: Path) -> None:
    """Run the notebook at ``path`` as a user would, its studies in the folder ``runs``: no
    error in any cell, and its plots inline."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("HPSEARCH_RUN_DIR", str(runs))
    monkeypatch.setenv("HPSEARCH_STUDIES", str(path.parent.parent / "studies"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    book = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), (
        "committed without outputs"
    )
    NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors
    images = [
        o
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert images, "the plots show inline"
