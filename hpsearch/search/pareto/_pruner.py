"""The ``pareto`` pruner: successive halving whose rungs are ranked by Pareto fronts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from hpsearch.search.pareto._fronts import (
    VALUES_ATTR,
    RungRanking,
    describe_violation,
    rank_at_rung,
    step_constraints,
    step_values,
    violation,
)

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from hpsearch.spec import StudySpec


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
        constraints: The spec's bounds by metric (``{"params": {"max": 2e5}}``): infeasible
            trials at a rung rank after every feasible one (see :func:`nondominated_fronts`).
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
        constraints: Mapping[str, Mapping[str, float]] | None = None,
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
        self.constraints = {m: dict(b) for m, b in (constraints or {}).items()}

    def rung_of(self, step: int) -> int | None:
        """The rung at ``step`` (0 for ``min_resource``), or ``None`` if it is not a rung."""
        if self.max_resource is not None and step >= self.max_resource:
            return None
        r, k = self.min_resource, 0
        while r < step:
            r, k = r * self.reduction_factor, k + 1
        return k if r == step else None

    def ranking(
        self,
        study: optuna.Study,
        number: int,
        step: int,
        values: Sequence[float],
        constraints: Mapping[str, float] | None = None,
    ) -> RungRanking | None:
        """Where the trial ``number`` with ``values`` (and ``constraints``, its constraint
        values) at ``step`` stands, or ``None`` when ``step`` is no rung or too few other
        trials reported it."""
        if self.rung_of(step) is None:
            return None
        others, violations = [], []
        for t in study.get_trials(deepcopy=False):
            if t.number == number or t.state in (TrialState.FAIL, TrialState.WAITING):
                continue
            at = t.user_attrs.get(f"{VALUES_ATTR}{step}")
            if isinstance(at, list) and len(at) == len(values):
                others.append([float(v) for v in at])
                violations.append(
                    violation(step_constraints(t, step, self.constraints, self.metrics))
                )
        if len(others) < self.n_startup_trials:
            return None
        points = [*others, [float(v) for v in values]]
        return rank_at_rung(
            points,
            len(points) - 1,
            self.directions,
            reduction_factor=self.reduction_factor,
            violations=[*violations, violation(constraints or {})] if self.constraints else None,
        )

    def should_prune(
        self,
        study: optuna.Study,
        number: int,
        step: int,
        values: Sequence[float],
        constraints: Mapping[str, float] | None = None,
    ) -> tuple[bool, str | None]:
        """The decision for a trial at ``step``, and the reason when it is pruned."""
        ranking = self.ranking(study, number, step, values, constraints)
        if ranking is None or ranking.promoted:
            return False, None
        return True, self.explain(step, values, ranking, constraints)

    def explain(
        self,
        step: int,
        values: Sequence[float],
        ranking: RungRanking,
        constraints: Mapping[str, float] | None = None,
    ) -> str:
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
        where = f"is on front {ranking.front}"
        if ranking.violation > 0.0:
            why = describe_violation(self.constraints, constraints or {})
            where = f"is infeasible ({why}), ranked after the feasible: front {ranking.front}"
        return (
            f"pareto pruner at step {step} (rung {self.rung_of(step)}): {shown} {where} "
            f"of {ranking.n_fronts} among {ranking.n_trials} trials at that "
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
        own = step_constraints(trial, step, self.constraints, self.metrics)
        return self.should_prune(study, trial.number, step, by_step[step], own)[0]


def build_pareto_pruner(spec: StudySpec) -> Any:
    """The ``pareto`` pruner of a study spec (an Optuna ``BasePruner``)."""
    options = dict(spec.search.pruner.options)
    cls = type("ParetoPruner", (ParetoPruner, _base_pruner()), {})
    return cls(
        [d.value for d in spec.directions],
        metrics=list(spec.metrics),
        max_resource=options.pop("max_resource", spec.objective.epochs),
        constraints=spec.constraints,
        **options,
    )
