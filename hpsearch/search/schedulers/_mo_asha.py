"""ASHA for several objectives (MO-ASHA, Schmucker et al., "Multi-objective Asynchronous
Successive Halving", 2021): the trials at a rung are ranked by non-dominated sorting
instead of by one value.

The ranking of a rung, best first:

1. **Fronts.** Non-dominated sorting of the trials' values at the rung; with
   ``objective.constraints`` by Deb's constrained domination (feasible trials first, then
   the infeasible ones by their total violation; see
   :func:`hpsearch.search.pareto.nondominated_fronts`).
2. **Crowding distance** within a front (NSGA-II's): the trials at the ends of the front
   along each objective come first, then those whose neighbours on the front are furthest
   apart. It only matters for the front that straddles the cut: it keeps the promoted part
   of that front spread along the trade-off instead of bunched at one end.
3. **Trial number**, earlier first: the ranking is a pure function of the values.

The top ``len(rung) // eta`` of that order can be promoted, as in single-objective ASHA.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch.search.pareto import (
    describe_violation,
    nondominated_fronts,
    step_constraints,
    step_values,
    violation,
)
from hpsearch.search.schedulers._asha import AshaScheduler

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


@dataclass(frozen=True)
class RungPoint:
    """A trial's values at a rung (one per objective) and its constraint values there
    (Optuna's convention: feasible when <= 0; empty without constraints)."""

    values: tuple[float, ...]
    constraints: Mapping[str, float] = field(default_factory=dict)

    @property
    def violation(self) -> float:
        return violation(self.constraints)


def crowding_distances(points: Sequence[Sequence[float]]) -> list[float]:
    """NSGA-II's crowding distance of each point of one front: for each objective, the gap
    between its two neighbours (sorted by that objective, ties by position), over the
    objective's range; the two ends are infinitely far.

    >>> crowding_distances([(0.0, 4.0), (1.0, 3.0), (3.0, 1.0), (4.0, 0.0)])
    [inf, 1.5, 1.5, inf]
    >>> crowding_distances([(1.0, 2.0), (2.0, 1.0)])
    [inf, inf]
    """
    n = len(points)
    out = [0.0] * n
    if n == 0:
        return out
    for k in range(len(points[0])):
        order = sorted(range(n), key=lambda i: (points[i][k], i))
        low, high = points[order[0]][k], points[order[-1]][k]
        out[order[0]] = out[order[-1]] = math.inf
        if high == low:
            continue
        for prev, i, nxt in zip(order, order[1:], order[2:], strict=False):
            out[i] += (points[nxt][k] - points[prev][k]) / (high - low)
    return out


def pareto_order(
    points: Mapping[int, RungPoint], directions: Sequence[str]
) -> tuple[list[int], dict[int, int]]:
    """A rung's trial numbers best first (fronts, then crowding distance, then number), and
    each trial's front (0 for the first).

    >>> pts = {0: RungPoint((0.9, 9.0)), 1: RungPoint((0.8, 5.0)), 2: RungPoint((0.7, 7.0)),
    ...        3: RungPoint((0.6, 1.0)), 4: RungPoint((0.5, 8.0)), 5: RungPoint((0.95, 20.0))}
    >>> pareto_order(pts, ["maximize", "minimize"])[0]
    [3, 5, 1, 0, 2, 4]
    """
    numbers = sorted(points)
    values = [points[n].values for n in numbers]
    fronts = nondominated_fronts(
        values, directions, violations=[points[n].violation for n in numbers]
    )
    crowd = [0.0] * len(numbers)
    for level in set(fronts):
        members = [i for i, f in enumerate(fronts) if f == level]
        for i, d in zip(members, crowding_distances([values[i] for i in members]), strict=True):
            crowd[i] = d
    order = sorted(range(len(numbers)), key=lambda i: (fronts[i], -crowd[i], numbers[i]))
    return [numbers[i] for i in order], {numbers[i]: fronts[i] for i in range(len(numbers))}


def promotable_points(
    points: Mapping[int, RungPoint], promoted: set[int], eta: int, directions: Sequence[str]
) -> list[int]:
    """The trials of a rung in the top ``len(points) // eta`` of :func:`pareto_order` not
    yet promoted, best first.

    >>> pts = {0: RungPoint((1.0, 5.0)), 1: RungPoint((2.0, 2.0)), 2: RungPoint((3.0, 3.0))}
    >>> promotable_points(pts, set(), 3, ["minimize", "minimize"])
    [0]
    """
    order, _ = pareto_order(points, directions)
    return [n for n in order[: len(points) // eta] if n not in promoted]


class ParetoAshaScheduler(AshaScheduler):
    """Promotion-based ASHA whose rungs are ranked by Pareto fronts (see the module).

    Args:
        directions: One per objective (``"maximize"`` / ``"minimize"``).
        metrics: The objectives' names, for the reasons.
        constraints: The spec's bounds by metric, to describe an infeasible trial.
        min_epochs, reduction_factor, brackets, max_epochs: As for :class:`AshaScheduler`.
    """

    def __init__(
        self,
        *,
        directions: Sequence[str],
        metrics: Sequence[str],
        constraints: Mapping[str, Mapping[str, float]] | None = None,
        min_epochs: int,
        reduction_factor: int,
        brackets: int,
        max_epochs: int,
    ) -> None:
        super().__init__(
            min_epochs=min_epochs,
            reduction_factor=reduction_factor,
            brackets=brackets,
            max_epochs=max_epochs,
            maximize=False,
            metric=", ".join(metrics),
        )
        self.directions = [str(getattr(d, "value", d)).lower() for d in directions]
        self.metrics = list(metrics)
        self.constraints = {m: dict(b) for m, b in (constraints or {}).items()}

    ordered = False  # a rung is ranked by Pareto fronts, not by one number

    def _promotable(self, values: Mapping[int, Any], promoted: set[int]) -> list[int]:
        return promotable_points(values, promoted, self.eta, self.directions)

    def _at(self, trial: FrozenTrial, epoch: int) -> RungPoint | None:
        values = step_values(trial).get(epoch)
        if values is None:
            return None
        own = step_constraints(trial, epoch, self.constraints, self.metrics)
        return RungPoint(tuple(values), own)

    def reason(self, number: int, rung: int) -> str:
        bracket = self._bracket(number)
        points: Mapping[int, RungPoint] = bracket.values[rung]
        me = points[number]
        order, fronts = pareto_order(points, self.directions)
        shown = ", ".join(f"{m} {v:.6g}" for m, v in zip(self.metrics, me.values, strict=False))
        head = (
            f"asha: paused at rung {rung} (epoch {bracket.rungs[rung]}) and never promoted: {shown}"
        )
        if me.violation > 0.0:
            head += f" is infeasible ({describe_violation(self.constraints, me.constraints)}),"
            head += " ranked after every feasible trial,"
        mine, n = fronts[number], len(points)
        where = f" on front {mine + 1} of {max(fronts.values()) + 1} among the rung's {n} trials"
        keep = n // self.eta
        if keep == 0:
            return f"{head}{where}; fewer than {self.eta} trials reached the rung (no cut-off)"
        out = f"{head}{where}; only the top 1/{self.eta} ({keep} trial{'s' if keep != 1 else ''})"
        out += " go on"
        same = [m for m in order if fronts[m] == mine]
        if any(order.index(m) < keep for m in same):  # its front straddles the cut
            out += (
                f"; its front's {len(same)} trials were split by crowding distance "
                f"and it ranked {same.index(number) + 1} of them"
            )
        return out
