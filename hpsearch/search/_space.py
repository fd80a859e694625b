"""The spec's search space as Optuna distributions.

The coordinator asks Optuna with :func:`to_distributions`; inside a trial :func:`suggest` calls
``trial.suggest_*`` with exactly the same distributions, so a trial asked with
``fixed_distributions`` returns the asked values, and a user's own objective sees the usual
Optuna API.

Example:
    >>> import optuna
    >>> from hpsearch.spec import FloatParam, CategoricalParam
    >>> space = {
    ...     "lr": FloatParam(type="float", low=1e-4, high=1e-1, log=True),
    ...     "optimizer": CategoricalParam(type="categorical", choices=["adam", "sgd"]),
    ... }
    >>> study = optuna.create_study()
    >>> trial = study.ask(fixed_distributions=to_distributions(space))
    >>> suggest(trial, space) == trial.params
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import SpecError
from hpsearch.spec import CategoricalParam, FloatParam, IntParam

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

    from hpsearch.spec import ParamSpec

__all__ = ["grid_search_space", "suggest", "to_distributions"]


def to_distributions(space: Mapping[str, ParamSpec]) -> dict[str, BaseDistribution]:
    """Convert a spec search space to Optuna distributions.

    Args:
        space: Parameter name to :class:`~hpsearch.spec.FloatParam`,
            :class:`~hpsearch.spec.IntParam` or :class:`~hpsearch.spec.CategoricalParam`.

    Returns:
        Parameter name to ``FloatDistribution``, ``IntDistribution`` or
        ``CategoricalDistribution``, in the order of ``space``.
    """
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    distributions: dict[str, BaseDistribution] = {}
    for name, param in space.items():
        if isinstance(param, FloatParam):
            distributions[name] = FloatDistribution(
                param.low, param.high, log=param.log, step=param.step
            )
        elif isinstance(param, IntParam):
            distributions[name] = IntDistribution(
                param.low, param.high, log=param.log, step=param.step
            )
        else:
            distributions[name] = CategoricalDistribution(param.choices)
    return distributions


def suggest(trial: optuna.Trial, space: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """Suggest every parameter of ``space`` on ``trial``.

    Args:
        trial: The running trial.
        space: The spec search space.

    Returns:
        Parameter name to the suggested value.
    """
    values: dict[str, Any] = {}
    for name, param in space.items():
        if isinstance(param, FloatParam):
            values[name] = trial.suggest_float(
                name, param.low, param.high, step=param.step, log=param.log
            )
        elif isinstance(param, IntParam):
            values[name] = trial.suggest_int(
                name, param.low, param.high, step=param.step, log=param.log
            )
        else:
            values[name] = trial.suggest_categorical(name, param.choices)
    return values


def grid_search_space(space: Mapping[str, ParamSpec]) -> dict[str, list[Any]]:
    """The value grid of ``space`` for :class:`optuna.samplers.GridSampler`.

    Int ranges are expanded with their step; a float needs a step and is expanded with it
    (computed in decimal, so ``0.1`` steps give ``0.3``, not ``0.30000000000000004``).

    Args:
        space: The spec search space.

    Returns:
        Parameter name to the list of its values.

    Raises:
        SpecError: A float parameter has no step.

    Example:
        >>> from hpsearch.spec import FloatParam, IntParam
        >>> grid_search_space({
        ...     "channels": IntParam(type="int", low=8, high=32, step=8),
        ...     "dropout": FloatParam(type="float", low=0.0, high=0.3, step=0.1),
        ... })
        {'channels': [8, 16, 24, 32], 'dropout': [0.0, 0.1, 0.2, 0.3]}
    """
    grid: dict[str, list[Any]] = {}
    for name, param in space.items():
        if isinstance(param, CategoricalParam):
            grid[name] = list(param.choices)
        elif isinstance(param, IntParam):
            grid[name] = list(range(param.low, param.high + 1, param.step))
        elif param.step is None:
            raise SpecError(
                f"space.{name}: the grid sampler needs a finite set of values: "
                "give this float a step, or make it int or categorical"
            )
        else:
            low, high, step = (Decimal(repr(v)) for v in (param.low, param.high, param.step))
            n_steps = int((high - low) / step)
            grid[name] = [float(low + i * step) for i in range(n_steps + 1)]
    return grid
