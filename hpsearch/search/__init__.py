"""The Optuna side of a study: the search space, the sampler and the pruner a spec asks for,
the best trial, studies that change (carried edits, warm starts), and every read of Optuna's
private attributes (:mod:`hpsearch.search._optuna`). Multi-objective search is in
:mod:`hpsearch.search.pareto`, the schedulers that pause and promote in
:mod:`hpsearch.search.schedulers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.search._best import best_complete_trial
    from hpsearch.search._carry import (
        VERSION_ATTR,
        carried_sampler,
        changes,
        record_spec,
        refuse_breaking,
    )
    from hpsearch.search._optuna import (
        cached_trial,
        give_relative_sample,
        storage_of,
        study_id_of,
        trial_id_of,
    )
    from hpsearch.search._pruning import build_pruner, explain_prune
    from hpsearch.search._sampling import build_sampler, relative_sample
    from hpsearch.search._space import suggest, to_distributions
    from hpsearch.search._start import (
        StartPlan,
        changes_of,
        existing,
        existing_in,
        plan_start,
        prepare,
        start_study,
    )
    from hpsearch.search._warm_start import (
        WarmSource,
        WarmStart,
        apply,
        carry_for,
        check_sources,
        end_notes,
        open_sources,
        outcome,
        with_warm_start,
    )

__all__ = [
    "VERSION_ATTR",
    "StartPlan",
    "WarmSource",
    "WarmStart",
    "apply",
    "best_complete_trial",
    "build_pruner",
    "build_sampler",
    "cached_trial",
    "carried_sampler",
    "carry_for",
    "changes",
    "changes_of",
    "check_sources",
    "end_notes",
    "existing",
    "existing_in",
    "explain_prune",
    "give_relative_sample",
    "open_sources",
    "outcome",
    "plan_start",
    "prepare",
    "record_spec",
    "refuse_breaking",
    "relative_sample",
    "start_study",
    "storage_of",
    "study_id_of",
    "suggest",
    "to_distributions",
    "trial_id_of",
    "with_warm_start",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._best": ("best_complete_trial",),
        "._carry": (
            "VERSION_ATTR",
            "carried_sampler",
            "changes",
            "record_spec",
            "refuse_breaking",
        ),
        "._optuna": (
            "cached_trial",
            "give_relative_sample",
            "storage_of",
            "study_id_of",
            "trial_id_of",
        ),
        "._pruning": (
            "build_pruner",
            "explain_prune",
        ),
        "._sampling": (
            "build_sampler",
            "relative_sample",
        ),
        "._space": (
            "suggest",
            "to_distributions",
        ),
        "._start": (
            "StartPlan",
            "changes_of",
            "existing",
            "existing_in",
            "plan_start",
            "prepare",
            "start_study",
        ),
        "._warm_start": (
            "WarmSource",
            "WarmStart",
            "apply",
            "carry_for",
            "check_sources",
            "end_notes",
            "open_sources",
            "outcome",
            "with_warm_start",
        ),
    },
)
