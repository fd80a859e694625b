"""Pareto fronts by non-dominated sorting (constrained where the study has constraints),
the ranking of a rung, and the per-step values and constraint values a trial stores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

VALUES_ATTR = "hpsearch.values."
#: The user attribute prefix of a trial's constraint values at a step (Optuna's convention:
#: feasible when <= 0): ``hpsearch.constraints.3`` = {"params.max": -5000.0}.
CONSTRAINTS_ATTR = "hpsearch.constraints."


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


def violation(constraints: Mapping[str, float]) -> float:
    """A trial's total constraint violation: the sum of its positive constraint values (0
    when it is feasible).

    Example:
        >>> violation({"params.max": 5000.0, "latency_ms.max": -1.0})
        5000.0
    """
    return float(sum(max(0.0, float(v)) for v in constraints.values()))


def nondominated_fronts(
    points: Sequence[Sequence[float]],
    directions: Sequence[str],
    *,
    violations: Sequence[float] | None = None,
) -> list[int]:
    """The front of each point by non-dominated sorting: 0 for the Pareto front, 1 for the
    front once that one is removed, and so on (Deb et al.'s fast non-dominated sort).

    With ``violations`` (each point's total constraint violation), domination is Deb's
    constrained domination: a feasible point (violation 0) dominates every infeasible one,
    and an infeasible point dominates those with a larger violation. So every infeasible
    point is on a front after all the feasible ones, in the order of their violations.

    Example:
        >>> nondominated_fronts([(1, 5), (2, 2), (5, 1)], ["minimize"] * 2, violations=[0, 3, 1])
        [0, 2, 1]
    """
    n = len(points)
    viol = [0.0] * n if violations is None else [max(0.0, float(v)) for v in violations]

    def beats(i: int, j: int) -> bool:
        if viol[i] > 0.0 or viol[j] > 0.0:
            return viol[i] < viol[j]
        return dominates(points[i], points[j], directions)

    dominated_by: list[list[int]] = [[] for _ in range(n)]  # i dominates these
    count = [0] * n  # how many points dominate i
    for i in range(n):
        for j in range(i + 1, n):
            if beats(i, j):
                dominated_by[i].append(j)
                count[j] += 1
            elif beats(j, i):
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
    violation: float = 0.0  # its total constraint violation (0: feasible)

    @property
    def promoted(self) -> bool:
        return self.ahead < self.keep


def rank_at_rung(
    points: Sequence[Sequence[float]],
    me: int,
    directions: Sequence[str],
    *,
    reduction_factor: int,
    violations: Sequence[float] | None = None,
) -> RungRanking:
    """Rank ``points[me]`` among ``points`` (every trial's values at the rung), with their
    constraint ``violations`` where the study has constraints (see
    :func:`nondominated_fronts`: infeasible trials rank after every feasible one).

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
    fronts = nondominated_fronts(points, directions, violations=violations)
    mine = fronts[me]
    return RungRanking(
        front=mine + 1,
        n_fronts=max(fronts) + 1,
        ahead=sum(f < mine for f in fronts),
        n_trials=len(points),
        keep=max(1, len(points) // int(reduction_factor)),
        violation=0.0 if violations is None else max(0.0, float(violations[me])),
    )


def step_values(trial: FrozenTrial) -> dict[int, list[float]]:
    """A trial's values by step, as reported through :data:`VALUES_ATTR` attributes."""
    out = {}
    for key, value in trial.user_attrs.items():
        if key.startswith(VALUES_ATTR) and isinstance(value, list):
            out[int(key.removeprefix(VALUES_ATTR))] = [float(v) for v in value]
    return out


def constraints_at(
    constraints: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
    values: Sequence[float],
) -> dict[str, float]:
    """The constraint values that a step's ``values`` (one per metric) decide: those on
    metrics that are objectives.

    Example:
        >>> constraints_at({"params": {"max": 1000}}, ["val_accuracy", "params"], [0.9, 1500])
        {'params.max': 500.0}
    """
    known = dict(zip(metrics, values, strict=False))
    return constraint_values({m: b for m, b in constraints.items() if m in known}, known)


def step_constraints(
    trial: FrozenTrial,
    step: int,
    constraints: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
) -> dict[str, float]:
    """A trial's constraint values at ``step``: the ones it stored for the step
    (:data:`CONSTRAINTS_ATTR`), else those its values at the step decide; ``{}`` when the
    study has no constraints."""
    if not constraints:
        return {}
    stored = trial.user_attrs.get(f"{CONSTRAINTS_ATTR}{step}")
    if isinstance(stored, Mapping):
        return {str(k): float(v) for k, v in stored.items()}
    at = trial.user_attrs.get(f"{VALUES_ATTR}{step}")
    if not isinstance(at, list):
        return {}
    return constraints_at(constraints, metrics, [float(v) for v in at])


def describe_violation(
    constraints: Mapping[str, Mapping[str, float]], values: Mapping[str, float]
) -> str:
    """The violated bounds in words, from Optuna's constraint values (``metric.max`` or
    ``metric.min``, feasible when <= 0).

    Example:
        >>> describe_violation({"params": {"max": 200000}}, {"params.max": 50000.0})
        'params 250000 > max 200000'
    """
    out = []
    for key, c in values.items():
        metric, _, kind = key.rpartition(".")
        if c <= 0.0 or kind not in ("max", "min") or kind not in constraints.get(metric, {}):
            continue
        bound = float(constraints[metric][kind])
        value = bound + c if kind == "max" else bound - c
        out.append(f"{metric} {value:.6g} {'>' if kind == 'max' else '<'} {kind} {bound:.6g}")
    return ", ".join(out) or "constraints not met"


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
