"""The search space: one model per hyperparameter kind, and the check of a whole ``space``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from hpsearch.spec._messages import (
    _allowed,
    _Bool,
    _did_you_mean,
    _expect_float,
    _fail,
    _Float,
    _Int,
    _optional,
    _Problems,
    _show,
    _Spec,
)

CategoricalChoice = None | bool | int | float | str
"""A value a categorical hyperparameter may take."""


class FloatParam(_Spec):
    """A float hyperparameter, searched in ``[low, high]``.

    Example:
        >>> FloatParam(type="float", low=1e-4, high=1e-1, log=True).log
        True
    """

    type: Literal["float"] = Field(description="Always 'float'.")
    low: _Float = Field(description="Lower bound (inclusive). Required.")
    high: _Float = Field(description="Upper bound (inclusive). Required; must be >= low.")
    log: _Bool = Field(
        default=False, description="Sample on a log scale (needs low > 0). Default false."
    )
    step: Annotated[float | None, BeforeValidator(_optional(_expect_float))] = Field(
        default=None,
        gt=0,
        description="Discretisation step (> 0; not with log). Default null: continuous.",
    )

    @model_validator(mode="after")
    def _check_range(self) -> FloatParam:
        problems = []
        if self.low > self.high:
            problems.append(f"low ({self.low:g}) must be <= high ({self.high:g})")
        if self.log and self.low <= 0:
            problems.append(f"log: true needs low > 0, got low {self.low:g}")
        if self.log and self.step is not None:
            problems.append(
                "log: true cannot be combined with a step (Optuna forbids it); drop one"
            )
        if problems:
            raise _fail("; ".join(problems))
        return self


class IntParam(_Spec):
    """An integer hyperparameter, searched in ``[low, high]`` in multiples of ``step``.

    Example:
        >>> IntParam(type="int", low=8, high=64, step=8).step
        8
    """

    type: Literal["int"] = Field(description="Always 'int'.")
    low: _Int = Field(description="Lower bound (inclusive). Required.")
    high: _Int = Field(description="Upper bound (inclusive). Required; must be >= low.")
    step: _Int = Field(default=1, ge=1, description="Step between values (>= 1). Default 1.")
    log: _Bool = Field(
        default=False, description="Sample on a log scale (needs low >= 1, step 1). Default false."
    )

    @model_validator(mode="after")
    def _check_range(self) -> IntParam:
        problems = []
        if self.low > self.high:
            problems.append(f"low ({self.low}) must be <= high ({self.high})")
        if self.log and self.low <= 0:
            problems.append(f"log: true needs low >= 1, got low {self.low}")
        if self.log and self.step != 1:
            problems.append(
                f"log: true cannot be combined with step {self.step} (Optuna forbids it); drop one"
            )
        if problems:
            raise _fail("; ".join(problems))
        return self


def _check_choices(value: Any) -> Any:
    if not isinstance(value, (list, tuple)):
        raise _fail(f"expected a list of choices, got {_show(value)}")
    if not value:
        raise _fail("must list at least one choice")
    for choice in value:
        if not (choice is None or isinstance(choice, (bool, int, float, str))):
            raise _fail(
                f"choices must be null, booleans, integers, numbers or strings, got {_show(choice)}"
            )
    return list(value)


class CategoricalParam(_Spec):
    """A hyperparameter chosen from a list.

    Example:
        >>> CategoricalParam(type="categorical", choices=["adam", "sgd"]).choices
        ['adam', 'sgd']
    """

    type: Literal["categorical"] = Field(description="Always 'categorical'.")
    choices: Annotated[list[CategoricalChoice], BeforeValidator(_check_choices)] = Field(
        description="Non-empty list of null/bool/int/float/str values. Required."
    )


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]
"""One searched hyperparameter, told apart by its ``type`` key."""

_PARAM_CLASSES: dict[str, type[_Spec]] = {
    "float": FloatParam,
    "int": IntParam,
    "categorical": CategoricalParam,
}


def _validate_space(raw: Any, problems: _Problems) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        problems.add("space", f"expected a mapping of hyperparameters, got {_show(raw)}")
        return {}
    built: dict[str, Any] = {}
    kinds = list(_PARAM_CLASSES)
    for name, param in raw.items():
        field = f"space.{name}"
        if isinstance(param, (FloatParam, IntParam, CategoricalParam)):
            built[name] = param
            continue
        if not isinstance(param, Mapping):
            problems.add(
                field,
                "expected a mapping such as {type: float, low: ..., high: ...}, "
                f"got {_show(param)}",
            )
            continue
        kind = param.get("type")
        if kind is None:
            problems.add(f"{field}.type", f"required {_allowed(kinds)}")
        elif kind not in _PARAM_CLASSES:
            problems.add(
                f"{field}.type",
                f"unknown type {_show(kind)}{_did_you_mean(str(kind), kinds)} {_allowed(kinds)}",
            )
        else:
            result = problems.validate(_PARAM_CLASSES[kind], param, field)
            if result is not None:
                built[name] = result
    return built
