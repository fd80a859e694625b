"""Several objectives at once: Pareto fronts, constraints, per-step reports and pruning.

A study with ``objective.metrics: [a, b]`` is an Optuna study with ``directions``; its Pareto
front is Optuna's own ``study.best_trials`` (feasible trials only, where constraints are set).

Optuna cannot prune such a study (``Trial.report`` refuses several values), so hpsearch keeps
each step's values as a user attribute of the trial (``hpsearch.values.<step>``, a list in the
order of the metrics) and prunes with :class:`ParetoPruner`: asynchronous successive halving
in which the trials at a rung are ranked by non-dominated sorting (as in MO-ASHA, Schmucker
et al., 2021) and only the top ``1/reduction_factor`` go on, front by front.

With ``objective.constraints`` the ranking uses constrained domination (Deb's rule, as
Optuna's NSGA-II does): a feasible trial beats an infeasible one, and of two infeasible
trials the one with the smaller total violation wins. A step's constraint values come from
the step's values where the constrained metric is an objective, else from the user
attribute ``hpsearch.constraints.<step>`` (which built-in models write each epoch); a
constraint known neither way counts as met. ``search.scheduler: asha`` ranks its rungs the
same way, with a tie-break inside the front that straddles the cut
(:mod:`hpsearch.search.schedulers._mo_asha`).

Example:
    >>> fronts = nondominated_fronts([(1, 5), (2, 2), (3, 3), (5, 1)], ["minimize", "minimize"])
    >>> fronts
    [0, 0, 1, 0]
"""

from hpsearch.search.pareto._fronts import (
    CONSTRAINTS_ATTR,
    VALUES_ATTR,
    RungRanking,
    constraint_values,
    constraints_at,
    describe_violation,
    dominates,
    nondominated_fronts,
    rank_at_rung,
    step_constraints,
    step_values,
    violation,
)
from hpsearch.search.pareto._pruner import ParetoPruner, build_pareto_pruner
from hpsearch.search.pareto._results import (
    apply_constraints,
    describe_goal,
    is_feasible,
    mark_pareto_runs,
    note_front,
    objective_values,
    pareto_numbers,
    study_directions,
    told_values,
)

__all__ = [
    "CONSTRAINTS_ATTR",
    "VALUES_ATTR",
    "ParetoPruner",
    "RungRanking",
    "apply_constraints",
    "build_pareto_pruner",
    "constraint_values",
    "constraints_at",
    "describe_goal",
    "describe_violation",
    "dominates",
    "is_feasible",
    "mark_pareto_runs",
    "nondominated_fronts",
    "note_front",
    "objective_values",
    "pareto_numbers",
    "rank_at_rung",
    "step_constraints",
    "step_values",
    "study_directions",
    "told_values",
    "violation",
]
