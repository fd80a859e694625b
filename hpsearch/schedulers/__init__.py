"""Schedulers that use checkpoints: a trial pauses at an epoch with its checkpoint written,
frees its set, and runs again later from that checkpoint (``search.scheduler``).

``asha``: asynchronous successive halving by promotion (:mod:`._asha`); with several
objectives its rungs are ranked by Pareto fronts (:mod:`._mo_asha`). ``pbt``
(population-based training) is a reserved name, refused by the spec for now. The
coordinator drives a scheduler through the hooks of :class:`Scheduler`; the decisions
themselves are pure functions, tested on their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch.schedulers._asha import AshaScheduler, cutoff, promotable, rung_epochs
from hpsearch.schedulers._base import (
    FROM_EPOCH,
    PARENT_TRIAL,
    PAUSED_AT,
    TARGET,
    Ended,
    Job,
    Scheduler,
)
from hpsearch.schedulers._mo_asha import (
    ParetoAshaScheduler,
    RungPoint,
    crowding_distances,
    pareto_order,
    promotable_points,
)

if TYPE_CHECKING:
    from hpsearch.spec import StudySpec

__all__ = [
    "FROM_EPOCH",
    "PARENT_TRIAL",
    "PAUSED_AT",
    "TARGET",
    "AshaScheduler",
    "Ended",
    "Job",
    "ParetoAshaScheduler",
    "RungPoint",
    "Scheduler",
    "build_scheduler",
    "crowding_distances",
    "cutoff",
    "pareto_order",
    "promotable",
    "promotable_points",
    "rung_epochs",
]


def build_scheduler(spec: StudySpec) -> Scheduler | None:
    """The study's scheduler, or None (``search.scheduler: none``)."""
    search = spec.search
    maximize = spec.direction.value == "maximize"
    if search.scheduler == "asha" and spec.is_multi_objective:
        return ParetoAshaScheduler(
            directions=[d.value for d in spec.directions],
            metrics=list(spec.metrics),
            constraints=spec.constraints,
            min_epochs=search.asha.min_epochs,
            reduction_factor=search.asha.reduction_factor,
            brackets=search.asha.brackets,
            max_epochs=spec.objective.epochs,
        )
    if search.scheduler == "asha":
        return AshaScheduler(
            min_epochs=search.asha.min_epochs,
            reduction_factor=search.asha.reduction_factor,
            brackets=search.asha.brackets,
            max_epochs=spec.objective.epochs,
            maximize=maximize,
            metric=spec.metric,
        )
    return None
