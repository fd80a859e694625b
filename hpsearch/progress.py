"""Live progress of a running study: a rich display in a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from hpsearch.coordinator import Progress


def describe(p: Progress) -> str:
    """One line of counts: ``3 complete · 1 pruned · 0 failed · 2 running · best 0.9611 (#4)``."""
    best = f"best {p.best_value:.4g} (#{p.best_number})" if p.best_value is not None else "best -"
    return (
        f"[green]{p.complete} complete[/] · [yellow]{p.pruned} pruned[/] · "
        f"[red]{p.failed} failed[/] · [cyan]{p.running} running[/] · [bold]{best}[/]"
    )


class RichProgress:
    """A live bar of ended trials over the budget, with the counts by state and the best value.

    Use as a context manager and pass the instance as ``on_progress``.
    """

    def __init__(self, console: Console, *, title: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._title = title
        self._task: Any = None

    def __enter__(self) -> RichProgress:
        self._progress.__enter__()
        self._task = self._progress.add_task(self._title, total=None, stats="starting...")
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, p: Progress) -> None:
        self._progress.update(self._task, total=p.n_trials, completed=p.ended, stats=describe(p))
