"""The lineage of a population-based study: which trial continued which, from which epoch,
and the hyperparameters a trial's line trained with, epoch by epoch.

A continuation's Optuna trial holds the user attributes ``parent_trial`` and ``from_epoch``
(and its MLflow run the tags ``hpsearch.parent_trial`` and ``hpsearch.from_epoch``); the
functions here read them from the study's trials only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch.search.schedulers._base import FROM_EPOCH, PARENT_TRIAL

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure
    from optuna.trial import FrozenTrial


@dataclass(frozen=True)
class Segment:
    """The epochs ``first_epoch..last_epoch`` that ``trial`` trained, with ``params``."""

    trial: int
    first_epoch: int
    last_epoch: int
    params: dict[str, Any]


def parents(trials: Sequence[FrozenTrial]) -> dict[int, tuple[int, int]]:
    """Each continuation's ``(parent trial, from_epoch)``, by trial number."""
    return {
        t.number: (int(t.user_attrs[PARENT_TRIAL]), int(t.user_attrs[FROM_EPOCH]))
        for t in trials
        if t.user_attrs.get(PARENT_TRIAL) is not None
    }


def _span(t: FrozenTrial, start: int) -> int:
    return max(t.intermediate_values) if t.intermediate_values else start


def ancestry(trials: Sequence[FrozenTrial], number: int) -> list[Segment]:
    """The line that led to trial ``number``, first trial first: each ancestor's segment ends
    at the epoch its descendant continued from.

    >>> from optuna.trial import create_trial
    >>> from optuna.distributions import FloatDistribution
    >>> d = {"lr": FloatDistribution(0.001, 1.0)}
    >>> a = create_trial(value=0.5, params={"lr": 0.1}, distributions=d,
    ...                  intermediate_values={1: 0.9, 2: 0.8, 3: 0.7})
    >>> b = create_trial(value=0.4, params={"lr": 0.12}, distributions=d,
    ...                  intermediate_values={3: 0.6, 4: 0.4},
    ...                  user_attrs={"parent_trial": 0, "from_epoch": 2})
    >>> a.number, b.number = 0, 1
    >>> [(s.trial, s.first_epoch, s.last_epoch) for s in ancestry([a, b], 1)]
    [(0, 1, 2), (1, 3, 4)]
    """
    by_number = {t.number: t for t in trials}
    links = parents(trials)
    line: list[Segment] = []
    end: int | None = None
    current: int | None = number
    while current is not None and current in by_number:
        t = by_number[current]
        parent = links.get(current)
        start = parent[1] if parent else 0
        last = _span(t, start) if end is None else end
        line.append(Segment(current, start + 1, last, dict(t.params)))
        end = parent[1] if parent else None
        current = parent[0] if parent else None
    return line[::-1]


def plot_lineage(study: optuna.Study, *, metric: str) -> Figure:
    """Every trial as a bar over the epochs it trained, an arrow from each parent (at the
    epoch it was continued from) to its continuation; the best trial's line in green."""
    from hpsearch._plotting import STATE_COLORS, _figure
    from hpsearch.search._best import best_complete_trial

    fig, ax = _figure(f"Lineage: trials over epochs ({metric})")
    trials = study.get_trials(deepcopy=False)
    links = parents(trials)
    best = best_complete_trial(study)
    line = {s.trial for s in ancestry(trials, best.number)} if best is not None else set()
    for t in trials:
        start = links[t.number][1] if t.number in links else 0
        color = "#2ca02c" if t.number in line else STATE_COLORS.get(t.state.name, "#7f7f7f")
        ax.plot([start, _span(t, start)], [t.number, t.number], color=color, linewidth=3)
        ax.annotate(str(t.number), (start, t.number), fontsize=7, ha="right", va="center")
    for child, (parent, epoch) in links.items():
        ax.annotate(
            "",
            xy=(epoch, child),
            xytext=(epoch, parent),
            arrowprops={
                "arrowstyle": "->",
                "color": "#2ca02c" if child in line else "#555555",
                "linewidth": 0.8,
                "connectionstyle": "arc3,rad=0.2",
            },
        )
    from matplotlib.lines import Line2D

    shown = sorted({t.state.name for t in trials})
    handles = [Line2D([], [], color=STATE_COLORS.get(s, "#7f7f7f"), lw=3) for s in shown]
    labels = [s.lower() for s in shown]
    if line:
        handles.append(Line2D([], [], color="#2ca02c", lw=3))
        labels.append("the best trial's line")
    ax.legend(handles, labels, loc="best", fontsize=8)
    ax.set_xlabel("epoch")
    ax.set_ylabel("trial")
    ax.invert_yaxis()
    return fig


def plot_param_schedule(study: optuna.Study, *, metric: str) -> Figure:
    """The best trial's hyperparameters along its line, epoch by epoch: what it trained
    with, inherited and perturbed at each continuation."""
    from matplotlib.figure import Figure

    from hpsearch.search._best import best_complete_trial

    best = best_complete_trial(study)
    trials = study.get_trials(deepcopy=False)
    line = ancestry(trials, best.number) if best is not None else []
    names = sorted({k for s in line for k, v in s.params.items() if isinstance(v, (int, float))})
    fig = Figure(figsize=(7.5, 1.2 + 1.8 * max(1, len(names))), layout="constrained")
    title = "Hyperparameter schedule of the best trial"
    if best is None or not names:
        fig.add_subplot().set_title(f"{title}: none")
        return fig
    fig.suptitle(f"{title} ({best.number}, {metric} {best.value:.4g})")
    by_number = {t.number: t for t in trials}
    for i, name in enumerate(names):
        ax = fig.add_subplot(len(names), 1, i + 1)
        xs: list[float] = []
        ys: list[float] = []
        for s in line:
            xs += [s.first_epoch - 1, s.last_epoch]
            ys += [float(s.params[name])] * 2
            ax.annotate(str(s.trial), (s.first_epoch - 1, float(s.params[name])), fontsize=7)
        ax.plot(xs, ys, marker="o", markersize=3, color="#2ca02c")
        dist = by_number[best.number].distributions.get(name)
        if getattr(dist, "log", False):
            ax.set_yscale("log")
        ax.set_ylabel(name)
    ax.set_xlabel("epoch")
    return fig


def has_lineage(study: optuna.Study) -> bool:
    """Whether any trial continues another (a pbt study that exploited at least once)."""
    return bool(parents(study.get_trials(deepcopy=False)))
