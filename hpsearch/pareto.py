"""Several objectives at once: Pareto fronts, constraints, per-step reports and pruning.

A study with ``objective.metrics: [a, b]`` is an Optuna study with ``directions``; its Pareto
front is Optuna's own ``study.best_trials`` (feasible trials only, where constraints are set).

Optuna cannot prune such a study (``Trial.report`` refuses several values), so hpsearch keeps
each step's values as a user attribute of the trial (``hpsearch.values.<step>``, a list in the
order of the metrics) and prunes with :class:`ParetoPruner`: asynchronous successive halving
in which the trials at a rung are ranked by non-dominated sorting (as in MO-ASHA, Schmucker
et al., 2021) and only the top ``1/reduction_factor`` go on, front by front.

Example:
    >>> fronts = nondominated_fronts([(1, 5), (2, 2), (3, 3), (5, 1)], ["minimize", "minimize"])
    >>> fronts
    [0, 0, 1, 0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from hpsearch.spec import StudySpec

__all__ = [
    "VALUES_ATTR",
    "ParetoPruner",
    "RungRanking",
    "constraint_values",
    "dominates",
    "nondominated_fronts",
    "pareto_numbers",
    "rank_at_rung",
    "step_values",
]

#: The user attribute prefix of a trial's values at a step: ``hpsearch.values.3`` = [0.91, 1e5].
VALUES_ATTR = "hpsearch.values."


def _better(directions: Sequence[str]) -> list[float]:
    """+1 where larger is better, -1 where smaller is."""
    return [1.0 if str(getattr(d, "value", d)).lower() == "maximize" else -1.0 for d in directions]


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every objective and better in one.

    Example:
        >>> dominates((0.9, 10), (0.8, 20), ["maximize", "minimize"])
        True
        >>> dominates((0.9, 30), (0.8, 20), ["maximize", "minimize"])
        False
    """
    sign = _better(directions)
    at_least = all(s * x >= s * y for s, x, y in zip(sign, a, b, strict=True))
    return at_least and any(s * x > s * y for s, x, y in zip(sign, a, b, strict=True))


def nondominated_fronts(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """The front of each point by non-dominated sorting: 0 for the Pareto front, 1 for the
    front once that one is removed, and so on (Deb et al.'s fast non-dominated sort)."""
    n = len(points)
    dominated_by: list[list[int]] = [[] for _ in range(n)]  # i dominates these
    count = [0] * n  # how many points dominate i
    for i in range(n):
        for j in range(i + 1, n):
            if dominates(points[i], points[j], directions):
                dominated_by[i].append(j)
                count[j] += 1
            elif dominates(points[j], points[i], directions):
                dominated_by[j].append(i)
                count[i] += 1
    front = [-1] * n
    current = [i for i in range(n) if count[i] == 0]
    level = 0
    while current:
        nxt = []
        for i in current:
            front[i] = level
            for j in dominated_by[i]:
                count[j] -= 1
                if count[j] == 0:
                    nxt.append(j)
        current, level = nxt, level + 1
    return front


@dataclass(frozen=True)
class RungRanking:
    """Where one trial stands among the trials that reported a rung's step."""

    front: int  # 1 for the Pareto front of the rung
    n_fronts: int
    ahead: int  # trials on better fronts
    n_trials: int  # trials compared, this one included
    keep: int  # how many go on

    @property
    def promoted(self) -> bool:
        return self.ahead < self.keep


def rank_at_rung(
    points: Sequence[Sequence[float]],
    me: int,
    directions: Sequence[str],
    *,
    reduction_factor: int,
) -> RungRanking:
    """Rank ``points[me]`` among ``points`` (every trial's values at the rung).

    ``max(1, n // reduction_factor)`` trials go on, as in Optuna's successive halving, taken
    front by front; the front that straddles the cut goes on whole (its trials are not
    worse than one another, and with few trials at a rung a tie-break would prune a trial
    no other trial beats).

    Example:
        >>> pts = [(0.9, 9.0), (0.8, 5.0), (0.7, 7.0), (0.6, 1.0), (0.5, 8.0), (0.95, 20.0)]
        >>> r = rank_at_rung(pts, 2, ["maximize", "minimize"], reduction_factor=3)
        >>> r.front, r.n_fronts, r.ahead, r.keep, r.promoted
        (2, 3, 4, 2, False)
    """
    fronts = nondominated_fronts(points, directions)
    mine = fronts[me]
    return RungRanking(
        front=mine + 1,
        n_fronts=max(fronts) + 1,
        ahead=sum(f < mine for f in fronts),
        n_trials=len(points),
        keep=max(1, len(points) // int(reduction_factor)),
    )


def step_values(trial: FrozenTrial) -> dict[int, list[float]]:
    """A trial's values by step, as reported through :data:`VALUES_ATTR` attributes."""
    out = {}
    for key, value in trial.user_attrs.items():
        if key.startswith(VALUES_ATTR) and isinstance(value, list):
            out[int(key.removeprefix(VALUES_ATTR))] = [float(v) for v in value]
    return out


def _base_pruner() -> type:
    import optuna

    return optuna.pruners.BasePruner


class ParetoPruner:
    """Successive halving for several objectives, ranking each rung by Pareto fronts.

    Rungs are at steps ``min_resource * reduction_factor ** k`` (below ``max_resource``: a
    trial at its last step has nothing left to save). At a rung, the trial's values are
    compared with those every other trial of the study reported at the same step (complete,
    pruned or running, as in ASHA); it goes on if fewer than ``max(1, n // reduction_factor)``
    trials are on better fronts (see :func:`rank_at_rung`).

    Args:
        directions: The study's directions (``"maximize"`` / ``"minimize"``), one per metric.
        metrics: The metric names, for the reasons.
        min_resource: The first rung's step. Default 1.
        reduction_factor: Keep the top 1/this at each rung. Default 3.
        max_resource: The last step of a trial (``objective.epochs``); no rung at or above it.
        n_startup_trials: Prune nothing until this many other trials reported a rung. Default 0.
    """

    def __init__(
        self,
        directions: Sequence[str],
        *,
        metrics: Sequence[str] | None = None,
        min_resource: int = 1,
        reduction_factor: int = 3,
        max_resource: int | None = None,
        n_startup_trials: int = 0,
    ) -> None:
        if min_resource < 1:
            raise ValueError(f"min_resource must be >= 1, got {min_resource}")
        if reduction_factor < 2:
            raise ValueError(f"reduction_factor must be >= 2, got {reduction_factor}")
        self.directions = [str(getattr(d, "value", d)).lower() for d in directions]
        self.metrics = list(metrics or [f"value_{i}" for i in range(len(self.directions))])
        self.min_resource = int(min_resource)
        self.reduction_factor = int(reduction_factor)
        self.max_resource = max_resource
        self.n_startup_trials = int(n_startup_trials)

    def rung_of(self, step: int) -> int | None:
        """The rung at ``step`` (0 for ``min_resource``), or ``None`` if it is not a rung."""
        if self.max_resource is not None and step >= self.max_resource:
            return None
        r, k = self.min_resource, 0
        while r < step:
            r, k = r * self.reduction_factor, k + 1
        return k if r == step else None

    def ranking(
        self, study: optuna.Study, number: int, step: int, values: Sequence[float]
    ) -> RungRanking | None:
        """Where the trial ``number`` with ``values`` at ``step`` stands, or ``None`` when
        ``step`` is no rung or too few other trials reported it."""
        if self.rung_of(step) is None:
            return None
        others = []
        for t in study.get_trials(deepcopy=False):
            if t.number == number or t.state.name in ("FAIL", "WAITING"):
                continue
            at = t.user_attrs.get(f"{VALUES_ATTR}{step}")
            if isinstance(at, list) and len(at) == len(values):
                others.append([float(v) for v in at])
        if len(others) < self.n_startup_trials:
            return None
        points = [*others, [float(v) for v in values]]
        return rank_at_rung(
            points, len(points) - 1, self.directions, reduction_factor=self.reduction_factor
        )

    def should_prune(
        self, study: optuna.Study, number: int, step: int, values: Sequence[float]
    ) -> tuple[bool, str | None]:
        """The decision for a trial at ``step``, and the reason when it is pruned."""
        ranking = self.ranking(study, number, step, values)
        if ranking is None or ranking.promoted:
            return False, None
        return True, self.explain(step, values, ranking)

    def explain(self, step: int, values: Sequence[float], ranking: RungRanking) -> str:
        """One line: which front the trial was on, among how many trials, and the cut.

        Example:
            >>> p = ParetoPruner(["maximize", "minimize"], metrics=["val_accuracy", "params"])
            >>> print(p.explain(3, [0.81, 12000.0], RungRanking(3, 3, 5, 9, 3)))
            ... # doctest: +NORMALIZE_WHITESPACE
            pareto pruner at step 3 (rung 1): val_accuracy 0.81, params 1.2e+04 is on front 3
            of 3 among 9 trials at that step, behind 5 trials on better fronts; only the top
            1/3 (3 trials) go on
        """
        shown = ", ".join(f"{m} {v:.4g}" for m, v in zip(self.metrics, values, strict=False))
        return (
            f"pareto pruner at step {step} (rung {self.rung_of(step)}): {shown} is on front "
            f"{ranking.front} of {ranking.n_fronts} among {ranking.n_trials} trials at that "
            f"step, behind {ranking.ahead} trial{'s' if ranking.ahead != 1 else ''} on better "
            f"fronts; only the top 1/{self.reduction_factor} ({ranking.keep} "
            f"trial{'s' if ranking.keep != 1 else ''}) go on"
        )

    # Optuna calls this through study.pruner; a multi-objective trial asks should_prune above.
    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        by_step = step_values(trial)
        if not by_step:
            return False
        step = max(by_step)
        return self.should_prune(study, trial.number, step, by_step[step])[0]


def build_pareto_pruner(spec: StudySpec) -> Any:
    """The ``pareto`` pruner of a study spec (an Optuna ``BasePruner``)."""
    options = dict(spec.search.pruner.options)
    cls = type("ParetoPruner", (ParetoPruner, _base_pruner()), {})
    return cls(
        [d.value for d in spec.directions],
        metrics=list(spec.metrics),
        max_resource=options.pop("max_resource", spec.objective.epochs),
        **options,
    )


def constraint_values(
    constraints: Mapping[str, Mapping[str, float]], metrics: Mapping[str, float]
) -> dict[str, float]:
    """Optuna's constraint values (feasible when <= 0) from the spec's bounds.

    Example:
        >>> constraint_values({"params": {"max": 1000}}, {"params": 1500.0})
        {'params.max': 500.0}
    """
    out = {}
    for metric, bounds in constraints.items():
        value = float(metrics[metric])
        if "max" in bounds:
            out[f"{metric}.max"] = value - float(bounds["max"])
        if "min" in bounds:
            out[f"{metric}.min"] = float(bounds["min"]) - value
    return out


def is_feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0.0 for v in trial.constraints.values())


def pareto_numbers(study: optuna.Study) -> list[int]:
    """The numbers of the study's Pareto-front trials (Optuna's ``best_trials``)."""
    return sorted(t.number for t in study.best_trials)


def apply_constraints(trial: Any, spec: StudySpec, metrics: Mapping[str, float]) -> None:
    """Set the spec's constraints on ``trial`` (Optuna's ``Trial.set_constraint``) from the
    trial's metrics; nothing when the spec has none."""
    if not spec.constraints:
        return
    for key, value in constraint_values(spec.constraints, metrics).items():
        trial.set_constraint(key, value)


def objective_values(result: Any, spec: StudySpec) -> list[float]:
    """The values an objective returned, one per metric of the spec.

    Raises:
        TrialDiverged: A value is not finite.
        TypeError: The objective returned the wrong number of values.
    """
    from hpsearch.exceptions import TrialDiverged

    n = len(spec.metrics)
    if isinstance(result, (list, tuple)):
        values = list(result)
    elif n == 1:
        values = [result]
    else:
        values = []
    if len(values) != n:
        raise TypeError(
            f"the objective returned {result!r}; this study optimizes {n} metrics "
            f"({', '.join(spec.metrics)}): return a tuple of {n} numbers in that order"
        )
    out = [float(v) for v in values]
    for name, v in zip(spec.metrics, out, strict=True):
        if not math.isfinite(v):
            raise TrialDiverged(f"objective returned {name} = {v}", step=None, value=v)
    return out


def note_front(
    front: dict[int, list[float]], number: int, values: Sequence[float], directions: Sequence[str]
) -> None:
    """Add a complete trial's values to a running front (trial number -> values), dropping
    the trials it dominates; nothing when it is dominated itself."""
    if any(dominates(v, values, directions) for v in front.values()):
        return
    for other in [n for n, v in front.items() if dominates(values, v, directions)]:
        del front[other]
    front[number] = [float(v) for v in values]


def told_values(outcome: Any) -> Any:
    """What the coordinator tells Optuna for a complete trial: its values (several
    objectives) or its value."""
    return outcome.values if outcome.values is not None else outcome.value


def study_directions(spec: StudySpec) -> dict[str, Any]:
    """``optuna.create_study``'s keyword for the spec: ``direction`` for one objective (as
    before), ``directions`` for several."""
    if spec.is_multi_objective:
        return {"directions": [d.value for d in spec.directions]}
    return {"direction": spec.direction.value}


def mark_pareto_runs(tracker: Any, study: optuna.Study, metrics: Sequence[str]) -> list[int]:
    """At the end of a multi-objective study: tag every ended trial's MLflow run
    ``hpsearch.pareto`` = true / false, and list the front on the study's run (the tag
    ``hpsearch.pareto_trials`` and the artifact ``pareto_front.json``). Returns the front."""
    import json

    from mlflow.entities import RunTag

    from hpsearch.tracking import find_trial_runs, tag

    front = pareto_numbers(study)
    client = tracker.client
    target = tracker.target
    runs = find_trial_runs(client, target)
    on_front = set(front)
    for trial in study.get_trials(deepcopy=False):
        run = runs.get(trial.number)
        if run is None or not trial.state.is_finished():
            continue
        value = "true" if trial.number in on_front else "false"
        if run.data.tags.get(tag.PARETO) != value:
            client.log_batch(run.info.run_id, tags=[RunTag(tag.PARETO, value)])
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    listing = [
        {
            "number": n,
            "values": dict(zip(metrics, trials[n].values, strict=False)),
            "params": dict(trials[n].params),
            "run_id": runs[n].info.run_id if n in runs else None,
        }
        for n in front
    ]
    client.log_batch(
        target.parent_run_id,
        tags=[RunTag(tag.PARETO_TRIALS, ",".join(str(n) for n in front) or "none")],
    )
    client.log_text(target.parent_run_id, json.dumps(listing, indent=2), "pareto_front.json")
    return front


def describe_goal(spec: StudySpec) -> str:
    """``maximize val_accuracy`` or ``maximize val_accuracy, minimize params`` (with the
    constraints: ``; params <= 2e+05``)."""
    goal = ", ".join(f"{d.value} {m}" for m, d in zip(spec.metrics, spec.directions, strict=True))
    bounds = [
        f"{m} {'<=' if k == 'max' else '>='} {v:.4g}"
        for m, b in spec.constraints.items()
        for k, v in b.items()
    ]
    return goal + (f"; {', '.join(bounds)}" if bounds else "")
