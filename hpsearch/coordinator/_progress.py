"""Live progress of a running study: the counts the coordinator keeps, and their displays (a
rich one in a terminal, a bar in Jupyter)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from hpsearch.trial import TrialOutcome


@dataclass
class Progress:
    """The study as the coordinator sees it, for progress displays."""

    n_trials: int
    complete: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    best_value: float | None = None
    best_number: int | None = None
    #: Several objectives: the complete trials no other complete trial dominates (number ->
    #: values), constraints aside; empty for one objective.
    front: dict[int, list[float]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    tracked: float | None = None  # when every worker's MLflow writes had landed
    last: TrialOutcome | None = None

    @property
    def ended(self) -> int:
        return self.complete + self.pruned + self.failed

    @property
    def elapsed(self) -> float:
        """Seconds since the coordinator started, frozen once it finished."""
        return (self.finished or time.monotonic()) - self.started


def describe(p: Progress) -> str:
    """One line of counts: ``3 complete · 1 pruned · 0 failed · 2 running · best 0.9611 (#4)``."""
    best = f"best {p.best_value:.4g} (#{p.best_number})" if p.best_value is not None else "best -"
    if p.front:  # several objectives: the Pareto front so far
        numbers = sorted(p.front)
        shown = ", ".join(f"#{n}" for n in numbers[:6]) + (" ..." if len(numbers) > 6 else "")
        best = f"front {len(numbers)} ({shown})"
    return (
        f"[green]{p.complete} complete[/] · [yellow]{p.pruned} pruned[/] · "
        f"[red]{p.failed} failed[/] · [cyan]{p.running} running[/] · [bold]{best}[/]"
    )


class RichProgress:
    """A live bar of ended trials over the budget, with the counts by state and the best value.

    Use as a context manager and pass the instance as ``on_progress``.
    """

    def __init__(self, console: Console, *, title: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

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


def plain(p: Progress) -> str:
    """:func:`describe` without rich markup."""
    import re

    return re.sub(r"\[/?[a-z ]*\]", "", describe(p))


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel."""
    import sys

    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


class NotebookProgress:
    """A progress bar of ended trials in Jupyter (tqdm's widget, or text without ipywidgets)."""

    def __init__(self, *, title: str) -> None:
        self._title = title
        self._bar: Any = None

    def __enter__(self) -> NotebookProgress:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=None, desc=self._title, unit="trial")
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()

    def __call__(self, p: Progress) -> None:
        if self._bar.total != p.n_trials:
            self._bar.total = p.n_trials
        self._bar.n = p.ended
        self._bar.set_postfix_str(plain(p), refresh=False)
        self._bar.refresh()


def auto_display(title: str) -> Any:
    """The display that suits where this runs: a bar in Jupyter, rich in a terminal, else none."""
    import contextlib
    import sys

    if in_notebook():
        return NotebookProgress(title=title)
    if sys.stderr.isatty():
        from rich.console import Console

        return RichProgress(Console(stderr=True), title=title)
    return contextlib.nullcontext()
