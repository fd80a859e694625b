"""The command line: ``hpsearch run | validate | worker``.

Exit codes: 0 when the study ran to its budget (whatever its trials' states), 2 for bad
input or an environment that cannot run the study (one line per problem, no traceback,
nothing created), 1 for an internal failure, 130 when interrupted (the trials in flight
then resume on the next run; a second Ctrl-C stops at once).

``worker`` is in ``_worker``, the views of a study that has run (``best``, ``status``,
``report``, ``ui``) in ``_views``, what the commands share in ``_common``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from hpsearch.cli._common import (
    _console,
    _docs,
    _interrupt_then_stop,
    _quiet_logs,
    _redact,
    _user_error,
)
from hpsearch.cli._pool import pool_app
from hpsearch.cli._simulate import simulate
from hpsearch.cli._views import best, report, status, ui
from hpsearch.cli._worker import worker
from hpsearch.search.pareto import describe_goal

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Distributed hyperparameter search: Optuna studies on Dask, PyTorch training, "
    "MLflow records.",
    epilog=_docs("index"),
)


def _load(file: Path, overrides: dict[str, Any]) -> Any:
    """The study file, validated; a renamed key it uses is one ``note:`` line on stderr."""
    import warnings

    from hpsearch.exceptions import SpecRenamed
    from hpsearch.spec import StudySpec

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpecRenamed)
        spec = StudySpec.from_yaml(
            file, overrides={k: v for k, v in overrides.items() if v is not None}
        )
    for warning in caught:
        if issubclass(warning.category, SpecRenamed):
            _console(stderr=True).print(f"[yellow]note:[/] {warning.message}", soft_wrap=True)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return spec


@app.command(epilog=_docs("reference/study-file"))
def validate(
    file: Path = typer.Argument(..., help="The study file."),
    run_dir: Path = typer.Option(
        Path("runs"), "--run-dir", help="The run folder, where the study may have run before."
    ),
) -> None:
    """Check a study file; print a one-line summary of what it would run, and what changed
    since the study last ran."""
    from hpsearch.exceptions import HpsearchError
    from hpsearch.study import Study

    try:
        spec = _load(file, {})
        lines = Study(spec, run_dir=run_dir).check()
    except HpsearchError as exc:
        raise _user_error(exc) from None
    from hpsearch.data import describe_dataset

    searched = ", ".join(spec.space) or "defined by the objective"
    typer.echo(
        f"{file}: ok — study '{spec.name}': {spec.objective.model} on "
        f"{describe_dataset(spec.objective.dataset)}, "
        f"{spec.search.n_trials} trials, {describe_goal(spec)}, "
        f"sampler {spec.search.sampler.name}, pruner {spec.search.pruner.name}, "
        f"searching {searched}"
    )
    for line in lines:
        typer.echo(line)


@app.command(epilog=_docs("getting-started"))
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
    address: str | None = typer.Option(
        None,
        "--address",
        "--scheduler",
        help="Address of an existing Dask scheduler or pool (--scheduler: its former name).",
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
                "address": address,
            },
        )
    except HpsearchError as exc:
        raise _user_error(exc) from None
    if dry_run:
        from hpsearch.cluster import backend_for

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

    from hpsearch.coordinator import RichProgress
    from hpsearch.study import Study

    console = _console()
    _quiet_logs()
    _interrupt_then_stop()
    study = Study(spec, run_dir=run_dir)
    simulated = spec.cluster.backend == "simulated"  # no MLflow: a benchmark's curves
    try:
        # Before anything is printed or created; the run starts from what it found.
        lines = study.check()
    except HpsearchError as exc:
        raise _user_error(exc) from None
    for line in lines:
        console.print(line, markup=False)
    console.print(
        f"[bold]study[/] {spec.name}  ({spec.search.n_trials} trials, {describe_goal(spec)})"
    )
    console.print(f"[bold]optuna storage[/] {_redact(study.storage_url)}", soft_wrap=True)
    if simulated:
        from hpsearch.simulation import describe

        console.print(f"[bold]simulated cluster[/] {describe(spec)}")
    else:
        console.print(
            f"[bold]mlflow[/] {_redact(study.mlflow_uri)}  experiment '{study.experiment}'"
        )
    try:
        with RichProgress(console, title=spec.name) as display:
            result = study.run(on_progress=display)
    except HpsearchError as exc:
        raise _user_error(exc) from None
    except KeyboardInterrupt:
        _console(stderr=True).print(
            "[yellow]interrupted:[/] the trials in flight are not ended: run the same "
            "command again and they resume from their last checkpoint"
        )
        raise typer.Exit(130) from None
    _summary(console, result)


def _summary(console: Any, result: Any) -> None:
    from rich.table import Table

    p = result.progress
    console.print(
        f"[bold]{p.ended}[/] trials ended: "
        f"{p.complete} complete, {p.pruned} pruned, {p.failed} failed"
    )
    for note in result.notes:
        console.print(note, highlight=False)
    if result.front:
        numbers = ", ".join(f"#{t.number}" for t in sorted(result.front, key=lambda t: t.number))
        console.print(
            f"[bold]Pareto front[/]: {len(result.front)} trials ({numbers}); "
            "hpsearch best shows them"
        )
    elif result.best is None and p.complete and p.front:
        console.print("[yellow]no complete trial meets the constraints[/]")
    elif result.best is None:
        console.print("[yellow]no trial completed[/]")
    else:
        table = Table(title=f"best trial #{result.best.number}", show_header=True)
        table.add_column("parameter")
        table.add_column("value", justify="right")
        for key, value in result.best.params.items():
            table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
        table.add_row("[bold]value[/]", f"[bold]{result.best.value:.6g}[/]")
        console.print(table)
    console.print(f"[bold]optuna storage[/] {result.storage_url}", soft_wrap=True)
    if result.simulation is not None:
        sim = result.simulation
        console.print(
            f"[bold]simulated[/] {sim['simulated_s'] / 3600:.2f} h of cluster time, "
            f"{sim['device_hours']:.1f} device-hours, {sim['worker_losses']} worker losses "
            f"(in {sim['wall_s']:.1f} s)"
        )
        if not result.mlflow_uri:  # cluster.simulated.tracking: false
            return
    uri = _redact(result.mlflow_uri)
    console.print(f"[bold]mlflow[/] {uri}  (the trials, in the MLflow UI:)", soft_wrap=True)
    # The command on a line of its own, never wrapped by rich: copied whole from the terminal.
    console.print(f"mlflow ui --backend-store-uri {uri}", soft_wrap=True, markup=False)


# The worker and the views, in their own modules; registered here, after validate and run,
# in the order ``hpsearch --help`` lists them.
app.command(epilog=_docs("howto/dask-cluster"))(worker)
app.command(epilog=_docs("getting-started"))(best)
app.command(epilog=_docs("getting-started"))(status)
app.command(epilog=_docs("getting-started"))(report)
app.command(epilog=_docs("getting-started"))(ui)
app.command(epilog=_docs("simulation"))(simulate)
app.add_typer(pool_app, name="pool", epilog=_docs("pool"))


def main() -> None:
    """Entry point of the ``hpsearch`` command."""
    from hpsearch._process import freeze_heap_at_exit

    freeze_heap_at_exit()
    try:
        app()
    except SystemExit:
        raise
    except Exception:  # an internal failure: show it, exit 1
        import traceback

        traceback.print_exc()
        sys.exit(1)
