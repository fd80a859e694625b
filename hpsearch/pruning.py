"""The Optuna pruner a study spec asks for, and a human reason for each prune.

Example:
    >>> from hpsearch.spec import StudySpec
    >>> spec = StudySpec.from_dict({
    ...     "name": "demo",
    ...     "objective": {"model": "cnn", "epochs": 9},
    ...     "space": {"x": {"type": "int", "low": 1, "high": 4}},
    ...     "search": {"pruner": "hyperband"},
    ... })
    >>> type(build_pruner(spec)).__name__
    'HyperbandPruner'
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from hpsearch.spec import PRUNER_CLASSES

if TYPE_CHECKING:
    import optuna
    from optuna.pruners import BasePruner
    from optuna.trial import FrozenTrial

    from hpsearch.spec import StudySpec

__all__ = ["build_pruner", "explain_prune"]

# The trials each pruner compares a trial against: Optuna's median and percentile pruners use
# completed trials only; successive halving and hyperband compare within a rung, where running
# and pruned trials count too.
_FINISHED_ONLY = ("median", "percentile")


def build_pruner(spec: StudySpec) -> BasePruner:
    """Build the pruner named by ``spec.search.pruner``, with its options.

    Defaults hpsearch uses (options in the spec override them):

    * ``median``: ``n_startup_trials=2, n_warmup_steps=1``. Optuna's defaults (5 and 0) would
      prune nothing in a study of a dozen trials, and a first epoch is too noisy to judge on.
    * ``percentile``: ``percentile=25.0`` (the worst quarter is pruned), otherwise like median.
    * ``hyperband``: ``min_resource=1, max_resource=objective.epochs, reduction_factor=3``:
      the resource is the epoch, and the maximum is known, so Optuna need not guess it.
    * ``successive_halving`` and ``none``: Optuna's defaults.

    Args:
        spec: The validated study spec.

    Returns:
        A new pruner.
    """
    import optuna

    name = spec.search.pruner.name
    defaults: dict[str, Any] = {}
    if name == "median":
        defaults = {"n_startup_trials": 2, "n_warmup_steps": 1}
    elif name == "percentile":
        defaults = {"percentile": 25.0, "n_startup_trials": 2, "n_warmup_steps": 1}
    elif name == "hyperband":
        defaults = {
            "min_resource": 1,
            "max_resource": spec.objective.epochs,
            "reduction_factor": 3,
        }
    pruner_class = getattr(optuna.pruners, PRUNER_CLASSES[name])
    pruner: BasePruner = pruner_class(**{**defaults, **spec.search.pruner.options})
    return pruner


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def explain_prune(
    study: optuna.Study,
    trial: FrozenTrial | int,
    step: int,
    value: float,
    *,
    pruner_name: str,
    metric: str = "value",
) -> str:
    """Say why a trial was pruned, in one line.

    Compares ``value`` with what the study's other trials reported at the same ``step``
    (their count, median and best in the study's direction). Pure: it only reads
    ``study.get_trials(deepcopy=False)``.

    Args:
        study: The (single-objective) study.
        trial: The pruned trial, or its number; it is left out of the comparison.
        step: The step at which it was pruned.
        value: The value it reported at ``step``.
        pruner_name: The spec's pruner name, e.g. ``"median"``.
        metric: The metric's name, for the text.

    Returns:
        For example ``"median pruner at step 3: val_accuracy 0.412 is worse than the median
        0.731 of 6 other trials at step 3 (best 0.902)"``.

    Example:
        >>> import optuna
        >>> study = optuna.create_study(direction="minimize")
        >>> for v in (0.2, 0.4, 0.6):
        ...     t = study.ask(); t.report(v, 1); _ = study.tell(t, v)
        >>> print(explain_prune(study, 9, 1, 0.9, pruner_name="median", metric="val_loss"))
        ... # doctest: +NORMALIZE_WHITESPACE
        median pruner at step 1: val_loss 0.9 is worse than the median 0.4
        of 3 other trials at step 1 (best 0.2)
    """
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    number = trial if isinstance(trial, int) else trial.number
    states = (
        (TrialState.COMPLETE,)
        if pruner_name in _FINISHED_ONLY
        else (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    )
    others = [
        t.intermediate_values[step]
        for t in study.get_trials(deepcopy=False, states=states)
        if t.number != number
        and step in t.intermediate_values
        and not math.isnan(t.intermediate_values[step])
    ]
    head = f"{pruner_name} pruner at step {step}: {metric} {_fmt(value)}"
    if not others:
        return f"{head}; no other trial has reported step {step} yet"
    maximize = study.direction == StudyDirection.MAXIMIZE
    median = statistics.median(others)
    best = max(others) if maximize else min(others)
    if value == median:
        verdict = "equals"
    elif (value < median) == maximize:
        verdict = "is worse than"
    else:
        verdict = "is better than"
    noun = "trial" if len(others) == 1 else "trials"
    return (
        f"{head} {verdict} the median {_fmt(median)} of {len(others)} other {noun} "
        f"at step {step} (best {_fmt(best)})"
    )
