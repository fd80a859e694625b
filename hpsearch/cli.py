"""The command line: ``hpsearch run | validate | worker``.

Exit codes: 0 when the study ran to its budget (whatever its trials' states), 2 for bad
input or an environment that cannot run the study (one line per problem, no traceback,
nothing created), 1 for an internal failure, 130 when interrupted.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, Optional

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Distributed hyperparameter search: Optuna studies on Dask, PyTorch training, MLflow records.",
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

    return StudySpec.from_yaml(file, overrides={k: v for k, v in overrides.items() if v is not None})


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
        f"{file}: ok — study '{spec.name}': {spec.objective.model} on {describe_dataset(spec.objective.dataset)}, "
        f"{spec.search.n_trials} trials, {spec.direction.value} {spec.metric}, "
        f"sampler {spec.search.sampler.name}, pruner {spec.search.pruner.name}, searching {searched}"
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


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@app.command()
def run(
    file: Path = typer.Argument(..., help="The study file."),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", help="Override search.n_trials."),
    n_workers: Optional[int] = typer.Option(None, "--n-workers", help="Override cluster.n_workers."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Override objective.epochs."),
    run_dir: Path = typer.Option(Path("runs"), "--run-dir", help="The run folder: RUN_DIR/NAME/ holds the study's files."),
    storage: Optional[str] = typer.Option(None, "--storage", help="Override the Optuna storage URL."),
    mlflow_uri: Optional[str] = typer.Option(None, "--mlflow-uri", help="Override the MLflow tracking URI."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Address of an existing Dask scheduler."),
) -> None:
    """Run a study (or resume it) until its trial budget is spent."""
    from hpsearch.exceptions import HpsearchError

    try:
        spec = _load(file, {
            "n_trials": n_trials, "n_workers": n_workers, "epochs": epochs, "storage": storage,
            "mlflow_uri": mlflow_uri, "scheduler": scheduler,
        })
    except HpsearchError as exc:
        raise _user_error(exc) from None

    from hpsearch.progress import RichProgress
    from hpsearch.study import Study

    console = _console()
    _quiet_logs()
    _sigterm_as_interrupt()
    study = Study(spec, run_dir=run_dir)
    console.print(f"[bold]study[/] {spec.name}  ({spec.search.n_trials} trials, {spec.direction.value} {spec.metric})")
    console.print(f"[bold]optuna storage[/] {study.storage_url if not spec.storage else _redact(spec.storage)}")
    console.print(f"[bold]mlflow[/] {study.mlflow_uri}  experiment '{study.experiment}'")
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
    scheduler: str = typer.Argument(..., help="Address of the Dask scheduler to join, e.g. tcp://10.0.0.1:8786."),
    gpus: str = typer.Option("auto", "--gpus", help="GPUs of this node: auto, none, or a list such as 0,1,2,3."),
    gpus_per_trial: int = typer.Option(1, "--gpus-per-trial", help="Size of each worker's GPU set (one worker per set)."),
    mixed_sizes: bool = typer.Option(False, "--mixed-sizes", help="One worker owning all devices, leasing subsets to trials of different sizes."),
    slots: Optional[int] = typer.Option(None, "--slots", help="CPU slots where the node has no GPUs (default: one per core)."),
    host: Optional[str] = typer.Option(None, "--host", help="Interface the workers listen on (default: 127.0.0.1 for a local scheduler, else all)."),
    name: Optional[str] = typer.Option(None, "--name", help="Prefix of the worker names (default: the host name)."),
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
                raise _user_error(ValueError(f"--gpus: expected auto, none or a list such as 0,1,2,3, got {gpus!r}")) from None
        specs, plan = worker_specs(
            gpus=devices, gpus_per_trial=gpus_per_trial, mixed_sizes=mixed_sizes, n_slots=slots,
            links=nvml_links(devices) if devices else None, prefix=name or socket.gethostname(),
        )
    except HpsearchError as exc:
        raise _user_error(exc) from None
    local = any(h in scheduler for h in ("127.0.0.1", "localhost", "[::1]"))
    console = _console()
    what = "GPU" if devices else "CPU slot"
    console.print(f"[bold]{len(specs)}[/] worker(s) joining {scheduler}: {plan.describe().replace('GPU set', what + ' set')}")
    for spec in specs.values():
        spec["options"]["host"] = host or ("127.0.0.1" if local else None)
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


def _redact(url: str) -> str:
    from hpsearch.storage import redact

    return redact(url)


def _summary(console: Any, result: Any) -> None:
    from rich.table import Table

    p = result.progress
    console.print(
        f"[bold]{p.ended}[/] trials ended: {p.complete} complete, {p.pruned} pruned, {p.failed} failed"
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
    console.print(f"[bold]mlflow[/] {result.mlflow_uri}  (mlflow ui --backend-store-uri {result.mlflow_uri})")


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
