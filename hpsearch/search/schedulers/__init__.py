"""Schedulers that use checkpoints: a trial pauses at an epoch with its checkpoint written,
frees its set, and runs again later from that checkpoint (``search.scheduler``).

``asha``: asynchronous successive halving by promotion (:mod:`._asha`); by default
(``brackets: auto``) its brackets follow how well early rungs predict the last epoch, measured
on the study's trials (:mod:`._adaptive`, :mod:`._estimate`); with several
objectives its rungs are ranked by Pareto fronts (:mod:`._mo_asha`, one bracket for auto). ``pbt``:
population-based training (:mod:`._pbt`). The
coordinator drives a scheduler through the hooks of :class:`Scheduler`; the decisions
themselves are pure functions, tested on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hpsearch._imports import lazy_attributes
from hpsearch.search.schedulers._adaptive import (
    BRACKET,
    DECISIONS,
    ESTIMATE,
    AdaptiveAshaScheduler,
    adaptation_tags,
    describe,
)
from hpsearch.search.schedulers._asha import AshaScheduler, cutoff, promotable, rung_epochs
from hpsearch.search.schedulers._base import (
    FROM_EPOCH,
    PARENT_TRIAL,
    PAUSED_AT,
    RESUMES,
    TARGET,
    Adaptation,
    Ended,
    Job,
    Scheduler,
    lineage_of,
)
from hpsearch.search.schedulers._estimate import RungEstimate, bracket_costs, estimate_rung
from hpsearch.search.schedulers._mo_asha import (
    ParetoAshaScheduler,
    RungPoint,
    crowding_distances,
    pareto_order,
    promotable_points,
)
from hpsearch.search.schedulers._pbt import PbtScheduler, exploit, perturb, snap

if TYPE_CHECKING:
    from hpsearch.search.schedulers._lineage import (
        ancestry,
        has_lineage,
        plot_lineage,
        plot_param_schedule,
    )
    from hpsearch.spec import StudySpec

__all__ = [
    "BRACKET",
    "DECISIONS",
    "ESTIMATE",
    "FROM_EPOCH",
    "PARENT_TRIAL",
    "PAUSED_AT",
    "RESUMES",
    "TARGET",
    "Adaptation",
    "AdaptiveAshaScheduler",
    "AshaScheduler",
    "Ended",
    "Job",
    "ParetoAshaScheduler",
    "PbtScheduler",
    "RungEstimate",
    "RungPoint",
    "Scheduler",
    "adaptation_tags",
    "ancestry",
    "bracket_costs",
    "build_scheduler",
    "crowding_distances",
    "cutoff",
    "describe",
    "estimate_rung",
    "exploit",
    "has_lineage",
    "lineage_of",
    "pareto_order",
    "perturb",
    "plot_lineage",
    "plot_param_schedule",
    "promotable",
    "promotable_points",
    "rung_epochs",
    "snap",
]


def build_scheduler(
    spec: StudySpec, *, params_of: Callable[[int], Mapping[str, Any]] | None = None
) -> Scheduler | None:
    """The study's scheduler, or None (``search.scheduler: none``); ``params_of`` reads a
    trial's parameters by its id (pbt perturbs them)."""
    search = spec.search
    maximize = spec.direction.value == "maximize"
    brackets = search.asha.brackets
    if search.scheduler == "asha" and spec.is_multi_objective:
        return ParetoAshaScheduler(
            directions=[d.value for d in spec.directions],
            metrics=list(spec.metrics),
            constraints=spec.constraints,
            min_epochs=search.asha.min_epochs,
            reduction_factor=search.asha.reduction_factor,
            brackets=1 if brackets == "auto" else brackets,
            max_epochs=spec.objective.epochs,
        )
    if search.scheduler == "asha" and brackets == "auto":
        return AdaptiveAshaScheduler(
            min_epochs=search.asha.min_epochs,
            reduction_factor=search.asha.reduction_factor,
            max_epochs=spec.objective.epochs,
            maximize=maximize,
            metric=spec.metric,
            n_trials=search.n_trials,
        )
    if search.scheduler == "asha":
        return AshaScheduler(
            min_epochs=search.asha.min_epochs,
            reduction_factor=search.asha.reduction_factor,
            brackets=int(brackets),
            max_epochs=spec.objective.epochs,
            maximize=maximize,
            metric=spec.metric,
        )
    if search.scheduler == "pbt":
        from hpsearch.search._space import to_distributions

        if params_of is None:
            raise ValueError("a pbt scheduler needs params_of")
        pbt = search.pbt
        return PbtScheduler(
            population=pbt.population,
            interval_epochs=pbt.interval_epochs,
            quantile=pbt.quantile,
            perturb=pbt.perturb,
            resample_probability=pbt.resample_probability,
            distributions=to_distributions(spec.space),
            mutate=pbt.mutate,
            n_trials=search.n_trials,
            max_epochs=spec.objective.epochs,
            maximize=maximize,
            params_of=params_of,
            seed=search.seed,
            metric=spec.metric,
        )
    return None


__getattr__ = lazy_attributes(
    __name__,
    {
        "._lineage": (
            "adaptation_tags",
            "ancestry",
            "has_lineage",
            "plot_lineage",
            "plot_param_schedule",
        ),
    },
)
