"""Reading a study back: its best trial, a table of its trials, and the plots people look at.

Everything here reads the Optuna study and the MLflow store with stock clients; nothing
needs the cluster. The plots are matplotlib figures (PNG in a report, inline in Jupyter);
:func:`write_report` also writes one interactive HTML page (plotly) of the same views.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from hpsearch._plotting import STATE_COLORS, TRANSFERRED_COLOR, _figure
from hpsearch.tracking import tag

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class BestTrial:
    """The best complete trial of a study."""

    number: int
    value: float
    params: dict[str, Any]
    run_id: str | None
    metric: str
    direction: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trial_runs(mlflow_uri: str, experiment: str, study_name: str) -> dict[int, Any]:
    """The MLflow run of each trial of a study, by trial number (empty if there is none)."""
    from hpsearch.tracking import get_client, runs_by_trial

    client = get_client(mlflow_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    return runs_by_trial(client, exp.experiment_id, tag.tag_filter(tag.STUDY, study_name))


def best_trial(
    study: optuna.Study, *, metric: str, runs: dict[int, Any] | None = None
) -> BestTrial | None:
    from hpsearch.search import best_complete_trial

    best = best_complete_trial(study)
    if best is None:
        return None
    run = (runs or {}).get(best.number)
    return BestTrial(
        best.number,
        float(best.values[0]),
        dict(best.params),
        run.info.run_id if run is not None else None,
        metric,
        study.direction.name.lower(),
    )


#: Per-rank memory of a built-in trial's run (its last epoch's values; the largest rank's):
#: parameters held, parameters + gradients + optimizer state, and peak memory (the process's
#: peak resident set on CPU, the caching allocator's peak on CUDA).
MEMORY_COLUMNS: tuple[str, ...] = (
    "param_bytes_per_rank",
    "train_state_bytes_per_rank",
    "peak_rss_bytes_per_rank",
    "cuda_max_allocated_bytes_per_rank",
)


def _run_columns(run: Any) -> dict[str, Any]:
    """The trial's layout, throughput and per-rank memory from its run, where it has them."""
    if run is None:
        return {}
    tags, metrics = run.data.tags, run.data.metrics
    out: dict[str, Any] = {}
    if tag.PARALLEL in tags:
        out["parallel"] = tags[tag.PARALLEL]
    if "samples_per_s" in metrics:
        out["samples_per_s"] = metrics["samples_per_s"]
    for column in MEMORY_COLUMNS:
        if column in metrics:
            out[column] = metrics[column]
            continue
        stem = column.removesuffix("_per_rank")
        ranks = [v for k, v in metrics.items() if k.startswith(f"{stem}_rank")]
        if ranks:  # logged per rank only (peak memory): the largest rank's
            out[column] = max(ranks)
    return out


def trials_dataframe(
    study: optuna.Study, *, runs: dict[int, Any] | None = None, metrics: Sequence[str] = ()
) -> pd.DataFrame:
    """One row per trial: number, state, value, duration_s, worker, devices, run_id, reason;
    from the trial's run where it has them: its layout (``parallel``), ``samples_per_s`` and
    per-rank memory (:data:`MEMORY_COLUMNS`, in bytes, the largest rank's: a trial of a
    built-in model logs them); then one column per parameter (``params_<name>``).

    With several objectives ``value`` is empty; each objective has its own column (named by
    ``metrics``, else ``value_0``, ``value_1``...) and ``pareto`` says whether the trial is on
    the Pareto front."""
    import pandas as pd

    runs = runs or {}
    rows = []
    multi = len(study.directions) > 1
    names = list(metrics) if metrics else [f"value_{i}" for i in range(len(study.directions))]
    front = {t.number for t in study.best_trials} if multi else set()
    for t in study.get_trials(deepcopy=False):
        run = runs.get(t.number)
        tags = run.data.tags if run is not None else {}
        duration = (
            (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start
            else None
        )
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "value": None if multi else t.value,
            "last_step": max(t.intermediate_values, default=None),
            "duration_s": duration,
            "worker": t.user_attrs.get(tag.WORKER) or tags.get(tag.WORKER),
            "devices": tags.get(tag.DEVICES),
            "run_id": run.info.run_id if run is not None else None,
            "reason": t.user_attrs.get(tag.FAIL_REASON) or t.user_attrs.get(tag.PRUNE_REASON),
        }
        if multi:
            values = t.values or [None] * len(names)
            row.update(dict(zip(names, values, strict=False)))
            row["pareto"] = t.number in front
        row.update(_run_columns(run))
        row.update({f"params_{k}": v for k, v in t.params.items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    # The run's columns (present in some rows only) before the parameters.
    params = [c for c in frame.columns if c.startswith("params_")]
    return frame[[c for c in frame.columns if not c.startswith("params_")] + params]


def plot_history(study: optuna.Study, *, metric: str) -> Figure:
    """Each complete trial's value by trial number, and the best so far; the configurations a
    warm start took from an earlier study in their own colour."""
    fig, ax = _figure(f"Optimization history: {metric}")
    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == TrialState.COMPLETE and t.value is not None
    ]
    maximize = study.direction.name == "MAXIMIZE"
    xs = [t.number for t in done]
    ys = [float(t.value) for t in done if t.value is not None]
    best: list[float] = []
    run: float | None = None
    for y in ys:
        run = y if run is None else (max(run, y) if maximize else min(run, y))
        best.append(run)
    moved = {t.number for t in done if tag.TRANSFERRED_FROM in t.user_attrs}
    for taken, colour, label in (
        (False, STATE_COLORS["COMPLETE"], "complete trial"),
        (True, TRANSFERRED_COLOR, "from an earlier study (warm start)"),
    ):
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if (x in moved) == taken]
        if points or not taken:
            ax.scatter(
                [p[0] for p in points], [p[1] for p in points], s=18, color=colour, label=label
            )
    if xs:
        ax.step(xs, best, where="post", color="#2ca02c", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.legend(loc="best")
    return fig


def plot_intermediate_values(study: optuna.Study, *, metric: str) -> Figure:
    """Learning curves: every trial's reports by step, coloured by how the trial ended."""
    fig, ax = _figure(f"Learning curves: {metric} per epoch")
    seen: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        if not t.intermediate_values:
            continue
        steps = sorted(t.intermediate_values)
        state = t.state.name
        ax.plot(
            steps,
            [t.intermediate_values[s] for s in steps],
            marker="o",
            markersize=2.5,
            linewidth=1.0,
            color=STATE_COLORS.get(state, "#7f7f7f"),
            alpha=0.8,
            label=state.lower() if state not in seen else None,
        )
        seen.add(state)
    ax.set_xlabel("step (epoch)")
    ax.set_ylabel(metric)
    if seen:
        ax.legend(loc="best")
    return fig


def plot_importances(study: optuna.Study, *, metric: str) -> Figure:
    """Hyperparameter importances (fANOVA over the complete trials)."""
    import optuna

    fig, ax = _figure(f"Hyperparameter importances for {metric}")
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    try:
        importances = optuna.importance.get_param_importances(study) if len(done) >= 2 else {}
    except (RuntimeError, ValueError):  # e.g. one parameter value only
        importances = {}
    if not importances:
        ax.text(
            0.5,
            0.5,
            "needs at least 2 complete trials with varied parameters",
            ha="center",
            va="center",
        )
        ax.set_axis_off()
        return fig
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names], color=STATE_COLORS["COMPLETE"])
    ax.set_xlabel("importance")
    return fig


def plot_parallel_coordinate(study: optuna.Study, *, metric: str) -> Figure:
    """Each complete trial as a line across its (scaled) parameters and its value."""
    fig, ax = _figure(f"Parallel coordinates: parameters and {metric}")
    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == TrialState.COMPLETE and t.value is not None
    ]
    names = sorted({k for t in done for k in t.params})
    if not done or not names:
        ax.text(0.5, 0.5, "no complete trials yet", ha="center", va="center")
        ax.set_axis_off()
        return fig
    columns = [*names, metric]

    def scaled(name: str) -> list[float]:
        raw = [t.params.get(name) if name != metric else t.value for t in done]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
            vals = [float(v) for v in raw if isinstance(v, (int, float))]
            log = name != metric and min(vals) > 0 and max(vals) / min(vals) > 100
            vals = [math.log10(v) for v in vals] if log else vals
        else:
            levels = sorted({str(v) for v in raw})
            vals = [float(levels.index(str(v))) for v in raw]
        lo, hi = min(vals), max(vals)
        return [0.5 if hi == lo else (v - lo) / (hi - lo) for v in vals]

    grid = [scaled(c) for c in columns]
    values = grid[-1]
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    for i in range(len(done)):
        ax.plot(
            range(len(columns)),
            [col[i] for col in grid],
            color=cmap(values[i]),
            alpha=0.7,
            linewidth=1.2,
        )
    ax.set_xticks(range(len(columns)), columns, rotation=20, ha="right")
    ax.set_yticks([0, 1], ["low", "high"])
    return fig


PLOTTERS = {
    "history": plot_history,
    "intermediate_values": plot_intermediate_values,
    "importances": plot_importances,
    "parallel_coordinate": plot_parallel_coordinate,
}


def write_report(
    study: optuna.Study, folder: Path, *, metric: str, metrics: Sequence[str] = ()
) -> list[Path]:
    """Write every plot as ``folder/NAME.png`` and the interactive ``folder/report.html``
    (with several objectives: the Pareto front, ``pareto_front.png``, and Optuna's view)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if len(study.directions) > 1:
        names = list(metrics) or [f"value_{i}" for i in range(len(study.directions))]
        path = folder / "pareto_front.png"
        plot_pareto_front(study, metrics=names).savefig(path, dpi=110)
        html = folder / "report.html"
        html.write_text(_pareto_html(study, names), encoding="utf-8")
        return [path, html]
    plotters = dict(PLOTTERS)
    from hpsearch.search.schedulers import has_lineage, plot_lineage, plot_param_schedule

    if has_lineage(study):  # population-based training: who continued whom, and with what
        plotters.update(lineage=plot_lineage, param_schedule=plot_param_schedule)
    for name, plot in plotters.items():
        path = folder / f"{name}.png"
        plot(study, metric=metric).savefig(path, dpi=110)
        written.append(path)
    html = folder / "report.html"
    html.write_text(_interactive_html(study, metric=metric), encoding="utf-8")
    written.append(html)
    return written


def _pareto_html(study: optuna.Study, metrics: Sequence[str]) -> str:
    """Optuna's interactive Pareto-front view, on one page."""
    import optuna.visualization as vis
    import plotly.io as pio

    try:
        body = pio.to_html(
            vis.plot_pareto_front(study, target_names=list(metrics)), full_html=False
        )
    except Exception as exc:  # too few trials
        body = f"<p>{type(exc).__name__}: {exc}</p>"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{study.study_name}</title>"
        f"</head><body><h1>{study.study_name}: Pareto front</h1>{body}</body></html>"
    )


def _interactive_html(study: optuna.Study, *, metric: str) -> str:
    """One self-contained page of Optuna's plotly views (plotly.js included once)."""
    import warnings

    import optuna.visualization as vis
    import plotly.io as pio

    views = [
        ("Optimization history", vis.plot_optimization_history),
        ("Learning curves", vis.plot_intermediate_values),
        ("Hyperparameter importances", vis.plot_param_importances),
        ("Parallel coordinates", vis.plot_parallel_coordinate),
    ]
    parts = [f"<h1>{study.study_name}: {metric}</h1>"]
    first = True
    for title, view in views:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fig = view(study)
        except Exception as exc:  # too few trials for this view
            parts.append(f"<h2>{title}</h2><p>{type(exc).__name__}: {exc}</p>")
            continue
        parts.append(f"<h2>{title}</h2>")
        parts.append(pio.to_html(fig, include_plotlyjs=first, full_html=False))
        first = False
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + study.study_name
        + "</title></head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )


@dataclass(frozen=True)
class ParetoTrial:
    """A trial on the Pareto front of a multi-objective study."""

    number: int
    values: dict[str, float]  # by metric, in the spec's order
    params: dict[str, Any]
    run_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pareto_front(
    study: optuna.Study, *, metrics: Sequence[str], runs: dict[int, Any] | None = None
) -> list[ParetoTrial]:
    """The study's Pareto front (Optuna's ``best_trials``: feasible, non-dominated), by the
    first metric, best first."""
    runs = runs or {}
    front = sorted(
        study.best_trials,
        key=lambda t: -t.values[0] if study.directions[0].name == "MAXIMIZE" else t.values[0],
    )
    out = []
    for t in front:
        run = runs.get(t.number)
        out.append(
            ParetoTrial(
                t.number,
                {m: float(v) for m, v in zip(metrics, t.values, strict=False)},
                dict(t.params),
                run.info.run_id if run is not None else None,
            )
        )
    return out


def plot_pareto_front(study: optuna.Study, *, metrics: Sequence[str]) -> Figure:
    """The complete trials by their objectives: the Pareto front in one colour, dominated
    trials in another, infeasible ones (constraints) crossed.

    Two objectives make one plot, the front joined in order. With three or more, every pair
    of objectives gets its own plot (a scatter matrix, the lower triangle): the front is
    the front over all objectives, so in one pair's plot a front trial may sit behind
    another one, and its points are not joined.
    """
    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == TrialState.COMPLETE and t.values is not None
    ]
    front = {t.number for t in study.best_trials}
    feasible = [t for t in done if all(v <= 0.0 for v in t.constraints.values())]
    groups = {
        "dominated": [t for t in feasible if t.number not in front],
        "infeasible": [t for t in done if t not in feasible],
        "front": [t for t in feasible if t.number in front],
    }
    directions = [d.name.lower() for d in study.directions]
    labels = [f"{m} ({d})" for m, d in zip(metrics, directions, strict=False)]
    n = len(labels)
    if n == 2:
        fig, ax = _figure(f"Pareto front: {metrics[0]} against {metrics[1]}")
        _pareto_pair(ax, groups, 0, 1, joined=True)
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        if not done:
            ax.text(0.5, 0.5, "no complete trials yet", ha="center", va="center")
        else:
            ax.legend(loc="best")
        return fig
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.2 * (n - 1), 3.0 * (n - 1)), layout="constrained")
    fig.suptitle(f"Pareto front over {n} objectives, every pair")
    axes = fig.subplots(n - 1, n - 1, squeeze=False)
    for row in range(n - 1):
        for col in range(n - 1):
            ax = axes[row][col]
            if col > row:  # the upper triangle repeats the lower one, mirrored
                ax.set_axis_off()
                continue
            _pareto_pair(ax, groups, col, row + 1, joined=False)
            if row == n - 2:
                ax.set_xlabel(labels[col])
            if col == 0:
                ax.set_ylabel(labels[row + 1])
    if done:
        handles, names = axes[0][0].get_legend_handles_labels()
        axes[0][n - 2].legend(handles, names, loc="center")  # in the empty upper corner
    else:
        axes[0][0].text(0.5, 0.5, "no complete trials yet", ha="center", va="center")
    return fig


def _pareto_pair(ax: Any, groups: Mapping[str, list[Any]], i: int, j: int, *, joined: bool) -> None:
    """Objective ``i`` against ``j`` for the trial groups of :func:`plot_pareto_front`."""
    if groups["dominated"]:
        ax.scatter(
            [t.values[i] for t in groups["dominated"]],
            [t.values[j] for t in groups["dominated"]],
            s=22,
            color="#9e9e9e",
            label="dominated",
        )
    if groups["infeasible"]:
        ax.scatter(
            [t.values[i] for t in groups["infeasible"]],
            [t.values[j] for t in groups["infeasible"]],
            s=26,
            marker="x",
            color=STATE_COLORS["FAIL"],
            label="infeasible (constraints)",
        )
    on_front = sorted(groups["front"], key=lambda t: t.values[i])
    if on_front:
        xs, ys = [t.values[i] for t in on_front], [t.values[j] for t in on_front]
        if joined:
            ax.plot(xs, ys, color="#2ca02c", linewidth=1.0, alpha=0.6)
        ax.scatter(xs, ys, s=34, color="#2ca02c", label="Pareto front", zorder=3)
        for t in on_front:
            ax.annotate(f"#{t.number}", (t.values[i], t.values[j]), fontsize=7, alpha=0.8)
