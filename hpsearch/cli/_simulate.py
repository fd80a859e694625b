"""``hpsearch simulate``: search methods side by side on a simulated cluster."""

from __future__ import annotations

from pathlib import Path

import typer

from hpsearch.cli._common import _console, _quiet_logs, _user_error


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise _user_error(ValueError(f"{name}: expected numbers >= 1 separated by commas"))
    return values


def simulate(
    file: Path = typer.Argument(..., help="A study file of cluster.backend: simulated."),
    workers: str = typer.Option("4,32", "--workers", help="Worker counts, e.g. 4,32,256."),
    seeds: int = typer.Option(5, "--seeds", min=1, help="Seeds per method and worker count."),
    methods: str = typer.Option(
        "random,tpe,tpe+hyperband,asha,pbt",
        "--methods",
        "--schedulers",
        help="Methods: random, tpe, hyperband, median, asha, pbt, or SAMPLER+STRATEGY.",
    ),
    out: Path = typer.Option(
        Path("simulation"), "--out", help="Folder for the plots (one per worker count)."
    ),
) -> None:
    """Compare search methods on the study's simulated cluster: any-time regret, plotted."""
    from rich.progress import Progress
    from rich.table import Table

    from hpsearch.exceptions import HpsearchError
    from hpsearch.simulation import method_overrides, plot, run_grid
    from hpsearch.spec import StudySpec

    counts = _ints(workers, "--workers")
    names = [m.strip() for m in methods.split(",") if m.strip()]
    try:
        for name in names:
            method_overrides(name)
        spec = StudySpec.from_yaml(file)
    except (HpsearchError, ValueError) as exc:
        raise _user_error(exc) from None
    if spec.cluster.backend != "simulated":
        raise _user_error(ValueError(f"{file}: cluster.backend: simulate needs backend: simulated"))
    console = _console()
    _quiet_logs()
    total = len(counts) * len(names) * seeds
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("simulating", total=total)

        def one(method: str, n: int, seed: int) -> None:
            bar.update(task, advance=1, description=f"{method} · {n} workers · seed {seed}")

        cells = run_grid(spec, methods=names, workers=counts, seeds=seeds, on_run=one)
    table = Table(title=f"{spec.name}: normalised regret at the end (IQM, 95 % interval)")
    for column in ("workers", "method", "regret", "95 % interval", "simulated h", "wall s"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for cell in cells:
        mid, low, high = cell.summary()
        table.add_row(
            str(cell.workers),
            cell.method,
            f"{mid:.4f}",
            f"{low:.4f} - {high:.4f}",
            f"{cell.times[-1] / 3600:.2f}",
            f"{cell.wall_s:.1f}",
        )
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    for n in counts:
        path = out / f"{spec.name}-{n}-workers.png"
        plot(cells, n, spec.name).savefig(path, dpi=110)
        console.print(f"[bold]plot[/] {path}")
