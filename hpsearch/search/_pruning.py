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

from hpsearch.search._optuna import hyperband_bracket, percentile, reduction_factor
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
    * ``pareto`` (several objectives): :class:`hpsearch.search.pareto.ParetoPruner` with
      ``max_resource=objective.epochs``.

    Args:
        spec: The validated study spec.

    Returns:
        A new pruner.
    """
    import optuna

    name = spec.search.pruner.name
    if name == "pareto":  # several objectives: ranked by Pareto fronts (hpsearch.search.pareto)
        from hpsearch.search.pareto import build_pareto_pruner

        pruner_: BasePruner = build_pareto_pruner(spec)
        return pruner_
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

    States the rule of the study's own pruner. Successive halving and Hyperband: whether the
    trial is in the top ``1/reduction_factor`` of the values at its rung (in its bracket, for
    Hyperband), with the rung's cut-off. Percentile: the percentile the pruner compares with.
    Otherwise (median, or no rung reached): the median of what the other trials reported at
    ``step``. Always with the count and the best value in the study's direction. It only
    reads the study (``study.get_trials(deepcopy=False)`` and ``study.pruner``).

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

    number = trial if isinstance(trial, int) else trial.number
    maximize = study.direction == StudyDirection.MAXIMIZE
    head = f"{pruner_name} pruner at step {step}: {metric} {_fmt(value)}"
    if pruner_name in _RUNG_BASED:
        rung = _rung_explanation(study, number, value, maximize=maximize)
        if rung is not None:
            return (
                f"{pruner_name} pruner at step {step} ({rung[0]}): {metric} {_fmt(value)} {rung[1]}"
            )
    others = _others_at(study, step, number, pruner_name)
    if not others:
        return f"{head}; no other trial has reported step {step} yet"
    best = max(others) if maximize else min(others)
    label, bar = _bar(study, others, pruner_name, maximize=maximize)
    noun = "trial" if len(others) == 1 else "trials"
    return (
        f"{head} {_verdict(value, bar, maximize=maximize)} {label} {_fmt(bar)} of "
        f"{len(others)} other {noun} at step {step} (best {_fmt(best)})"
    )


def _others_at(study: optuna.Study, step: int, number: int, pruner_name: str) -> list[float]:
    """What the trials the pruner compares with (all but trial ``number``) reported at
    ``step``, NaN left out. Median and percentile: completed trials only; the others: running
    and pruned trials too. It only reads the study."""
    from optuna.trial import TrialState

    states = (
        (TrialState.COMPLETE,)
        if pruner_name in _FINISHED_ONLY
        else (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    )
    return [
        t.intermediate_values[step]
        for t in study.get_trials(deepcopy=False, states=states)
        if t.number != number
        and step in t.intermediate_values
        and not math.isnan(t.intermediate_values[step])
    ]


def _bar(
    study: optuna.Study, others: list[float], pruner_name: str, *, maximize: bool
) -> tuple[str, float]:
    """What the trial's value is compared with, named: the percentile pruner's percentile of
    ``others``, else their median."""
    percentile = _percentile_of(study) if pruner_name == "percentile" else None
    if percentile is None:
        return "the median", statistics.median(others)
    # Optuna's percentile pruner keeps the best (100 - p) %: for a maximised metric it
    # compares with the (100 - p)th percentile, for a minimised one with the pth.
    import numpy as np

    q = 100.0 - percentile if maximize else percentile
    return f"the {_ordinal(q)} percentile", float(np.percentile(others, q))


def _verdict(value: float, bar: float, *, maximize: bool) -> str:
    """How ``value`` compares with ``bar`` in the study's direction, as words."""
    if value == bar:
        return "equals"
    if (value < bar) == maximize:
        return "is worse than"
    return "is better than"


def _ordinal(q: float) -> str:
    n = int(q) if float(q).is_integer() else q
    if isinstance(n, float):
        return f"{n:g}th"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _rung_explanation(
    study: optuna.Study, number: int, value: float, *, maximize: bool
) -> tuple[str, str] | None:
    """Successive halving's own rule: is the trial in the top 1/eta of its rung?

    Returns ``(where, verdict)``, e.g. ``("rung 1", "is not in the top 1/3 of the 7 trials at
    that rung (cut-off 0.73, best 0.9)")``, or ``None`` when the study's pruner is not rung-based
    or the trial has reached no rung (then the caller compares with the step's median).
    """
    from optuna.pruners import HyperbandPruner, SuccessiveHalvingPruner

    pruner = study.pruner
    if not isinstance(pruner, (SuccessiveHalvingPruner, HyperbandPruner)):
        return None
    trials = study.get_trials(deepcopy=False)
    me = next((t for t in trials if t.number == number), None)
    if me is None:
        return None
    rungs = [
        int(k.removeprefix(_RUNG_PREFIX)) for k in me.system_attrs if k.startswith(_RUNG_PREFIX)
    ]
    if not rungs:
        return None
    rung = max(rungs)
    key = f"{_RUNG_PREFIX}{rung}"
    where = f"rung {rung}"
    if isinstance(pruner, HyperbandPruner):
        bracket = hyperband_bracket(pruner, study, me)
        trials = [t for t in trials if hyperband_bracket(pruner, study, t) == bracket]
        where = f"bracket {bracket}, rung {rung}"
    eta = reduction_factor(pruner)
    competing = [
        float(t.system_attrs[key]) for t in trials if t.number != number and key in t.system_attrs
    ]
    competing.append(value)
    # Optuna promotes the top len // eta (at least the single best) of the rung's values.
    keep = max(len(competing) // eta, 1)
    ranked = sorted(competing, reverse=maximize)
    cutoff, best = ranked[keep - 1], ranked[0]
    noun = "trial" if len(competing) == 1 else "trials"
    promoted = (value >= cutoff) if maximize else (value <= cutoff)
    verdict = "is in" if promoted else "is not in"
    return where, (
        f"{verdict} the top 1/{eta} of the {len(competing)} {noun} at that rung "
        f"(cut-off {_fmt(cutoff)}, best {_fmt(best)})"
    )


_RUNG_PREFIX = "completed_rung_"
_RUNG_BASED = ("successive_halving", "hyperband")


def _percentile_of(study: optuna.Study) -> float | None:
    from optuna.pruners import PercentilePruner

    pruner = study.pruner
    return percentile(pruner) if isinstance(pruner, PercentilePruner) else None
