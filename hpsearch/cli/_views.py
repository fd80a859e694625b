"""The views of a study that has run: ``hpsearch best | status | report | ui``."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer

from hpsearch.cli._common import _console, _quiet_logs, _redact, _sigterm_as_interrupt, _user_error


def _open_study(target: Path, run_dir: Path) -> Any:
    """A study from its file (its run folder under ``run_dir``) or from its run folder."""
    from hpsearch.exceptions import HpsearchError, SpecError
    from hpsearch.study import Study

    try:
        study = Study.load(target) if target.is_dir() else Study.from_yaml(target, run_dir=run_dir)
        if not study.layout.journal.exists() and study.spec.storage is None:
            raise SpecError(
                f"{target}: the study {study.spec.name!r} has not run yet "
                f"(no {study.layout.journal})"
            )
        study.optuna_study()
    except KeyError:
        raise _user_error(
            SpecError(f"{target}: the study has not run yet (it is not in its storage)")
        ) from None
    except HpsearchError as exc:
        raise _user_error(exc) from None
    return study


_TARGET = typer.Argument(..., help="The study file, or the study's run folder (RUN_DIR/NAME).")
_RUN_DIR = typer.Option(
    Path("runs"), "--run-dir", help="The run folder of a study given by its file."
)


def best(
    target: Path = _TARGET,
    run_dir: Path = _RUN_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (for scripts)."),
) -> None:
    """The best trial: number, value, parameters and MLflow run id (with several
    objectives: the Pareto front, one row per trial)."""
    import json

    _quiet_logs()
    study = _open_study(target, run_dir)
    if study.spec.is_multi_objective:
        _print_front(study, as_json=as_json)
        return
    trial = study.best_trial
    if as_json:
        typer.echo(json.dumps(trial.to_dict() if trial is not None else None))
        return
    console = _console()
    if trial is None:
        console.print("[yellow]no trial completed yet[/]")
        raise typer.Exit(1)
    from rich.table import Table

    table = Table(title=f"{study.spec.name}: best trial #{trial.number}")
    table.add_column("parameter")
    table.add_column("value", justify="right")
    for key, value in trial.params.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    table.add_row(f"[bold]{trial.metric}[/] ({trial.direction})", f"[bold]{trial.value:.6g}[/]")
    console.print(table)
    console.print(f"[bold]mlflow run[/] {trial.run_id or '-'}")


def _print_front(study: Any, *, as_json: bool) -> None:
    """The Pareto front of a multi-objective study as a table (or JSON: a list of trials)."""
    import json

    front = study.pareto_front()
    if as_json:
        typer.echo(json.dumps([t.to_dict() for t in front]))
        return
    console = _console()
    if not front:
        console.print("[yellow]no trial completed yet (or none meets the constraints)[/]")
        raise typer.Exit(1)
    from rich.table import Table

    spec = study.spec
    table = Table(title=f"{spec.name}: Pareto front, {len(front)} trials")
    table.add_column("trial", justify="right")
    for metric, direction in zip(spec.metrics, spec.directions, strict=True):
        table.add_column(f"{metric} ({direction.value})", justify="right", style="bold")
    names = sorted({k for t in front for k in t.params})
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("mlflow run")
    for t in front:
        params = [t.params.get(k) for k in names]
        table.add_row(
            f"#{t.number}",
            *(f"{t.values[m]:.6g}" for m in spec.metrics),
            *(f"{v:.4g}" if isinstance(v, float) else str(v) for v in params),
            t.run_id or "-",
        )
    console.print(table)


def _status_view(study: Any) -> Any:
    """The study's counts and running trials: from its metrics endpoint while it runs (the
    figures Prometheus scrapes, with device use and throughput), from the storage otherwise."""
    from rich.console import Group
    from rich.table import Table

    from hpsearch.metrics import read_endpoint
    from hpsearch.search import outcome

    live = read_endpoint(study.layout.study_dir, study.spec.name)
    frame = study.trials_dataframe()
    counts = frame["state"].value_counts().to_dict() if len(frame) else {}
    n = study.spec.search.n_trials
    if live is not None and live["trials"]:
        t = live["trials"]
        counts = {
            "COMPLETE": int(t.get("complete", 0)),
            "PRUNED": int(t.get("pruned", 0)),
            "FAIL": int(t.get("failed", 0)),
            "RUNNING": int(t.get("running", 0)),
        }
        n = int(live.get("budget", n))
    from optuna.trial import TrialState

    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    ended = sum(counts.get(state.name, 0) for state in finished)
    best = study.best_trial
    head = (
        f"[bold]{study.spec.name}[/]: {ended}/{n} ended · "
        f"[green]{counts.get('COMPLETE', 0)} complete[/] · "
        f"[yellow]{counts.get('PRUNED', 0)} pruned[/] · [red]{counts.get('FAIL', 0)} failed[/] · "
        f"[cyan]{counts.get('RUNNING', 0)} running[/] · best "
        + (f"[bold]{best.value:.6g}[/] (#{best.number})" if best else "-")
    )
    if study.spec.is_multi_objective:
        front = [f"#{t.number}" for t in study.pareto_front()]
        head = head.removesuffix("best -") + f"Pareto front {len(front)} ({', '.join(front)})"
    lines: list[Any] = [head]
    warm = outcome(study.optuna_study())
    if warm:
        lines.append(warm)
    from hpsearch.search.schedulers import ESTIMATE, describe

    estimate = study.optuna_study().user_attrs.get(ESTIMATE)
    if estimate:  # asha brackets: auto
        lines.append(f"asha brackets auto: {describe(estimate)}")
    if live is not None:
        sets, backlog = live["sets"], live["backlog"]
        lines.append(
            f"live from {live['url']}: {int(live.get('queued', 0))} queued · device sets "
            f"{int(sets.get('busy', 0))} busy, {int(sets.get('idle', 0))} idle · "
            f"workers lost {int(live.get('losses', 0))}, trials retried "
            f"{int(live.get('retries', 0))} · tracking backlog "
            f"{int(sum(backlog.values()))}"
        )
        if live["utilization"]:
            lines.append(
                "utilisation: "
                + ", ".join(
                    f"{who} {device} {value:.0%}" for who, device, _, value in live["utilization"]
                )
            )
    throughput = live["throughput"] if live is not None else {}
    table = Table(title="running trials", show_header=True)
    for col in ("trial", "worker", "devices", "epoch", "samples/s", "epoch s", "params"):
        table.add_column(col)
    running = frame[frame["state"] == "RUNNING"] if len(frame) else frame
    for _, row in running.iterrows():
        params = ", ".join(
            f"{k[7:]}={v:.4g}" if isinstance(v, float) else f"{k[7:]}={v}"
            for k, v in row.items()
            if k.startswith("params_")
        )
        last = row["last_step"]
        figures = throughput.get(int(row["number"]), {})
        table.add_row(
            str(row["number"]),
            str(row["worker"] or "-"),
            str(row["devices"] or "-"),
            "-" if last is None or last != last else str(int(last)),
            f"{figures['samples_per_s']:.0f}" if "samples_per_s" in figures else "-",
            f"{figures['epoch_s']:.2f}" if "epoch_s" in figures else "-",
            params,
        )
    return Group(*lines, table if len(running) else "no trial running")


def status(
    target: Path = _TARGET,
    run_dir: Path = _RUN_DIR,
    watch: bool = typer.Option(False, "--watch", help="Refresh every 2 seconds until Ctrl-C."),
) -> None:
    """Trials by state, the best value so far, and the running trials with their worker,
    device set and current epoch; while the study runs, also its queue, device sets, device
    use, throughput, lost workers and tracking backlog (from its metrics endpoint)."""
    _quiet_logs()
    study = _open_study(target, run_dir)
    console = _console()
    if not watch:
        console.print(_status_view(study))
        return
    import time

    from rich.live import Live

    try:
        with Live(_status_view(study), console=console, refresh_per_second=2) as live:
            while True:
                time.sleep(2.0)
                live.update(_status_view(study))
    except KeyboardInterrupt:
        pass


def report(target: Path = _TARGET, run_dir: Path = _RUN_DIR) -> None:
    """Write the study's plots (PNG and one interactive HTML page) to its run folder and log
    them on the study's MLflow run."""
    _quiet_logs()
    study = _open_study(target, run_dir)
    files = study.report()
    console = _console()
    for path in files:
        console.print(f"wrote {path}")
    console.print(
        "and logged them under [bold]report/[/] on the study's MLflow run "
        f"({_redact(study.mlflow_uri)})"
    )


def ui(
    target: Path = _TARGET,
    run_dir: Path = _RUN_DIR,
    port: int = typer.Option(5000, "--port", help="Port of the MLflow UI on 127.0.0.1."),
) -> None:
    """Start the MLflow UI for the study's tracking store on 127.0.0.1 and the Optuna
    dashboard on the study's own storage on the next port (Ctrl-C stops them)."""
    import subprocess

    _quiet_logs()
    study = _open_study(target, run_dir)
    uri = study.mlflow_uri
    console = _console()
    if uri.startswith(("http://", "https://")):
        console.print(f"the study's tracking server is already a UI: [bold]{uri}[/]")
        return
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        uri,
    ]
    if uri.startswith("sqlite:") and study.layout.mlflow_artifacts.exists():
        cmd += ["--artifacts-destination", str(study.layout.mlflow_artifacts)]
    # The UI of a study needs no job runner (MLflow's GenAI evaluation jobs): without it, the
    # server is one process, not three.
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    _sigterm_as_interrupt()  # the UI runs until interrupted
    procs: list[subprocess.Popen[bytes]] = []
    try:  # from the first process on: a Ctrl-C at any moment stops what was started
        procs.append(subprocess.Popen(cmd, start_new_session=True, env=env))
        url = f"http://127.0.0.1:{port}"
        try:
            from hpsearch.tracking import get_client

            exp = get_client(uri).get_experiment_by_name(study.experiment)
            if exp is not None:
                # the runs table: the study, its trials nested
                url += f"/#/experiments/{exp.experiment_id}/runs"
        except Exception:  # the store is read by the UI itself anyway
            pass
        console.print(f"[bold]MLflow UI[/] {url}  (experiment '{study.experiment}')")
        dashboard = [sys.executable, "-m", "hpsearch.cli._dashboard", str(port + 1)]
        procs.append(
            subprocess.Popen(
                dashboard,
                start_new_session=True,
                env={**os.environ, "HPSEARCH_STORAGE": study.storage_url},
            )
        )
        console.print(f"[bold]Optuna dashboard[/] http://127.0.0.1:{port + 1}")
        console.print("Ctrl-C stops them")
        import time

        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    if procs and procs[0].returncode not in (0, None, -signal.SIGTERM):
        raise typer.Exit(procs[0].returncode)
