"""The command line: ``hpsearch run | validate | worker``.

Exit codes: 0 when the study ran to its budget (whatever its trials' states), 2 for bad
input or an environment that cannot run the study (one line per problem, no traceback,
nothing created), 1 for an internal failure, 130 when interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Distributed hyperparameter search: Optuna studies on Dask, PyTorch training, "
    "MLflow records.",
)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _user_error(exc: Exception) -> typer.Exit:
    err = _console(stderr=True)
    for line in str(exc).splitlines() or [type(exc).__name__]:
        err.print(f"[red]error:[/] {line}", markup=True, soft_wrap=True)
    return typer.Exit(2)


def _load(file: Path, overrides: dict[str, Any]) -> Any:
    from hpsearch.spec import StudySpec

    return StudySpec.from_yaml(
        file, overrides={k: v for k, v in overrides.items() if v is not None}
    )


@app.command()
def validate(file: Path = typer.Argument(..., help="The study file.")) -> None:
    """Check a study file; print a one-line summary of what it would run."""
    from hpsearch.exceptions import HpsearchError

    try:
        spec = _load(file, {})
    except HpsearchError as exc:
        raise _user_error(exc) from None
    from hpsearch.data import describe_dataset

    searched = ", ".join(spec.space) or "defined by the objective"
    typer.echo(
        f"{file}: ok — study '{spec.name}': {spec.objective.model} on "
        f"{describe_dataset(spec.objective.dataset)}, "
        f"{spec.search.n_trials} trials, {spec.direction.value} {spec.metric}, "
        f"sampler {spec.search.sampler.name}, pruner {spec.search.pruner.name}, "
        f"searching {searched}"
    )


def _quiet_logs() -> None:
    import logging
    import os
    import warnings

    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    for name in ("distributed", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # A lost worker is reported by the coordinator with what happens next (the trial resumes,
    # or fails after max_retries); the scheduler's own error line would only repeat it.
    logging.getLogger("distributed.scheduler").setLevel(logging.CRITICAL)


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@app.command()
def run(
    file: Path = typer.Argument(..., help="The study file."),
    n_trials: int | None = typer.Option(None, "--n-trials", help="Override search.n_trials."),
    n_workers: int | None = typer.Option(None, "--n-workers", help="Override cluster.n_workers."),
    epochs: int | None = typer.Option(None, "--epochs", help="Override objective.epochs."),
    run_dir: Path = typer.Option(
        Path("runs"), "--run-dir", help="The run folder: RUN_DIR/NAME/ holds the study's files."
    ),
    storage: str | None = typer.Option(None, "--storage", help="Override the Optuna storage URL."),
    mlflow_uri: str | None = typer.Option(
        None, "--mlflow-uri", help="Override the MLflow tracking URI."
    ),
    scheduler: str | None = typer.Option(
        None, "--scheduler", help="Address of an existing Dask scheduler."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print the SLURM job script, the Kubernetes manifest or the local workers, and stop.",
    ),
) -> None:
    """Run a study (or resume it) until its trial budget is spent."""
    from hpsearch.exceptions import HpsearchError

    try:
        spec = _load(
            file,
            {
                "n_trials": n_trials,
                "n_workers": n_workers,
                "epochs": epochs,
                "storage": storage,
                "mlflow_uri": mlflow_uri,
                "scheduler": scheduler,
            },
        )
    except HpsearchError as exc:
        raise _user_error(exc) from None
    if dry_run:
        from hpsearch.cluster._open import backend_for

        try:
            typer.echo(backend_for(spec).render())
        except ImportError as exc:
            extra = "slurm" if spec.cluster.backend == "slurm" else "kubernetes"
            raise _user_error(
                ValueError(
                    f"{file}: cluster.backend: {spec.cluster.backend} needs {exc.name}: "
                    f"pip install 'hpsearch[{extra}]'"
                )
            ) from None
        return

    from hpsearch.progress import RichProgress
    from hpsearch.study import Study

    console = _console()
    _quiet_logs()
    _sigterm_as_interrupt()
    study = Study(spec, run_dir=run_dir)
    try:
        from hpsearch.tracking import check_reachable

        storage_url = study.storage_url  # ${VAR} in the URLs: a missing one is a user error
        check_reachable(study.mlflow_uri)  # before anything is printed or created
    except HpsearchError as exc:
        raise _user_error(exc) from None
    console.print(
        f"[bold]study[/] {spec.name}  "
        f"({spec.search.n_trials} trials, {spec.direction.value} {spec.metric})"
    )
    console.print(f"[bold]optuna storage[/] {_redact(storage_url)}")
    console.print(f"[bold]mlflow[/] {_redact(study.mlflow_uri)}  experiment '{study.experiment}'")
    try:
        with RichProgress(console, title=spec.name) as display:
            result = study.run(on_progress=display)
    except HpsearchError as exc:
        raise _user_error(exc) from None
    except KeyboardInterrupt:
        _console(stderr=True).print(
            "[yellow]interrupted:[/] trials in flight were recorded as FAIL (interrupted); "
            "run the same command again to continue the study"
        )
        raise typer.Exit(130) from None
    _summary(console, result)


@app.command()
def worker(
    scheduler: str = typer.Argument(
        ..., help="Address of the Dask scheduler to join, e.g. tcp://10.0.0.1:8786."
    ),
    gpus: str = typer.Option(
        "auto", "--gpus", help="GPUs of this node: auto, none, or a list such as 0,1,2,3."
    ),
    gpus_per_trial: int = typer.Option(
        1, "--gpus-per-trial", help="Size of each worker's GPU set (one worker per set)."
    ),
    mixed_sizes: bool = typer.Option(
        False,
        "--mixed-sizes",
        help="One worker owning all devices, leasing subsets to trials of different sizes.",
    ),
    slots: int | None = typer.Option(
        None, "--slots", help="CPU slots where the node has no GPUs (default: one per core)."
    ),
    host: str | None = typer.Option(
        None,
        "--host",
        help="Interface the workers listen on "
        "(default: 127.0.0.1 for a local scheduler, else all).",
    ),
    name: str | None = typer.Option(
        None, "--name", help="Prefix of the worker names (default: the host name)."
    ),
    tls_ca_file: Path | None = typer.Option(
        None, "--tls-ca-file", help="TLS: the CA certificate (with --tls-cert and --tls-key)."
    ),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="TLS: this node's certificate."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="TLS: its private key."),
) -> None:
    """Start this node's workers, one per GPU set, and join an existing scheduler."""
    import asyncio
    import socket

    from hpsearch.cluster import discover_gpus, nvml_links, worker_specs
    from hpsearch.exceptions import HpsearchError

    try:
        if gpus == "none":
            devices = None
        elif gpus == "auto":
            devices = [g.index for g in discover_gpus()] or None
        else:
            try:
                devices = [int(x) for x in gpus.split(",") if x.strip()]
            except ValueError:
                raise _user_error(
                    ValueError(
                        f"--gpus: expected auto, none or a list such as 0,1,2,3, got {gpus!r}"
                    )
                ) from None
        specs, plan = worker_specs(
            gpus=devices,
            gpus_per_trial=gpus_per_trial,
            mixed_sizes=mixed_sizes,
            n_slots=slots,
            links=nvml_links(devices) if devices else None,
            prefix=name or socket.gethostname(),
        )
    except HpsearchError as exc:
        raise _user_error(exc) from None
    local = any(h in scheduler for h in ("127.0.0.1", "localhost", "[::1]"))
    console = _console()
    what = "GPU" if devices else "CPU slot"
    console.print(
        f"[bold]{len(specs)}[/] worker(s) joining {scheduler}: "
        f"{plan.describe().replace('GPU set', what + ' set')}"
    )
    given = [p for p in (tls_ca_file, tls_cert, tls_key) if p is not None]
    if given and len(given) != 3:
        raise _user_error(ValueError("--tls-ca-file, --tls-cert and --tls-key go together"))
    security = None
    if given:
        from types import SimpleNamespace

        from hpsearch.cluster._base import security as make_security

        security = make_security(
            SimpleNamespace(ca_file=str(tls_ca_file), cert=str(tls_cert), key=str(tls_key))
        )
    for spec in specs.values():
        spec["options"]["host"] = host or ("127.0.0.1" if local else None)
        if security is not None:
            spec["options"]["security"] = security
    asyncio.run(_serve_workers(scheduler, specs))


async def _serve_workers(scheduler: str, specs: dict[str, Any]) -> None:
    import asyncio

    from distributed import Nanny

    nannies = [Nanny(scheduler, **spec["options"]) for spec in specs.values()]
    await asyncio.gather(*nannies)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    finished = asyncio.ensure_future(asyncio.gather(*(n.finished() for n in nannies)))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([finished, stopped], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(*(n.close(timeout=20) for n in nannies), return_exceptions=True)


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


@app.command()
def best(
    target: Path = _TARGET,
    run_dir: Path = _RUN_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (for scripts)."),
) -> None:
    """The best trial: number, value, parameters and MLflow run id."""
    import json

    _quiet_logs()
    study = _open_study(target, run_dir)
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


def _status_view(study: Any) -> Any:
    from rich.console import Group
    from rich.table import Table

    frame = study.trials_dataframe()
    counts = frame["state"].value_counts().to_dict() if len(frame) else {}
    n = study.spec.search.n_trials
    ended = sum(counts.get(k, 0) for k in ("COMPLETE", "PRUNED", "FAIL"))
    best = study.best_trial
    head = (
        f"[bold]{study.spec.name}[/]: {ended}/{n} ended · "
        f"[green]{counts.get('COMPLETE', 0)} complete[/] · "
        f"[yellow]{counts.get('PRUNED', 0)} pruned[/] · [red]{counts.get('FAIL', 0)} failed[/] · "
        f"[cyan]{counts.get('RUNNING', 0)} running[/] · best "
        + (f"[bold]{best.value:.6g}[/] (#{best.number})" if best else "-")
    )
    table = Table(title="running trials", show_header=True)
    for col in ("trial", "worker", "devices", "epoch", "params"):
        table.add_column(col)
    running = frame[frame["state"] == "RUNNING"] if len(frame) else frame
    for _, row in running.iterrows():
        params = ", ".join(
            f"{k[7:]}={v:.4g}" if isinstance(v, float) else f"{k[7:]}={v}"
            for k, v in row.items()
            if k.startswith("params_")
        )
        last = row["last_step"]
        table.add_row(
            str(row["number"]),
            str(row["worker"] or "-"),
            str(row["devices"] or "-"),
            "-" if last is None or last != last else str(int(last)),
            params,
        )
    return Group(head, table) if len(running) else Group(head, "no trial running")


@app.command()
def status(
    target: Path = _TARGET,
    run_dir: Path = _RUN_DIR,
    watch: bool = typer.Option(False, "--watch", help="Refresh every 2 seconds until Ctrl-C."),
) -> None:
    """Trials by state, the best value so far, and the running trials with their worker,
    device set and current epoch."""
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


@app.command()
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


@app.command()
def ui(
    target: Path = _TARGET,
    run_dir: Path = _RUN_DIR,
    port: int = typer.Option(5000, "--port", help="Port of the MLflow UI on 127.0.0.1."),
) -> None:
    """Start the MLflow UI for the study's tracking store on 127.0.0.1 (Ctrl-C stops it); also
    the Optuna dashboard on the next port, if optuna-dashboard is installed."""
    import importlib.util
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
    procs = [subprocess.Popen(cmd, start_new_session=True)]
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
    if importlib.util.find_spec("optuna_dashboard") is not None:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "optuna_dashboard",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port + 1),
                    study.storage_url.replace("journal://", ""),
                ],
                start_new_session=True,
            )
        )
        console.print(f"[bold]Optuna dashboard[/] http://127.0.0.1:{port + 1}")
    console.print("Ctrl-C stops them")
    _sigterm_as_interrupt()
    try:
        while all(p.poll() is None for p in procs):
            import time

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
    if procs[0].returncode not in (0, None, -signal.SIGTERM):
        raise typer.Exit(procs[0].returncode)


def _redact(url: str) -> str:
    from hpsearch.storage import redact

    return redact(url)


def _summary(console: Any, result: Any) -> None:
    from rich.table import Table

    p = result.progress
    console.print(
        f"[bold]{p.ended}[/] trials ended: "
        f"{p.complete} complete, {p.pruned} pruned, {p.failed} failed"
    )
    if result.best is None:
        console.print("[yellow]no trial completed[/]")
    else:
        table = Table(title=f"best trial #{result.best.number}", show_header=True)
        table.add_column("parameter")
        table.add_column("value", justify="right")
        for key, value in result.best.params.items():
            table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
        table.add_row("[bold]value[/]", f"[bold]{result.best.value:.6g}[/]")
        console.print(table)
    console.print(f"[bold]optuna storage[/] {result.storage_url}")
    uri = _redact(result.mlflow_uri)
    console.print(f"[bold]mlflow[/] {uri}  (mlflow ui --backend-store-uri {uri})")


def main() -> None:
    """Entry point of the ``hpsearch`` command."""
    try:
        app()
    except SystemExit:
        raise
    except Exception:  # an internal failure: show it, exit 1
        import traceback

        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
