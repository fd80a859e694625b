"""The search section of a study file: budget, sampler, pruner, scheduler and their options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from hpsearch.spec._messages import (
    _AutoOrInt,
    _choice,
    _expect_float,
    _expect_int,
    _expect_str,
    _fail,
    _Int,
    _optional,
    _Seconds,
    _show,
    _Spec,
)
from hpsearch.spec._warm_start import WarmStarts

SAMPLER_CLASSES: dict[str, str] = {
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "grid": "GridSampler",
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "qmc": "QMCSampler",
    "nsga2": "NSGAIISampler",
}
"""Sampler names a study file may use, and the ``optuna.samplers`` class each one builds."""

PRUNER_CLASSES: dict[str, str] = {
    "none": "NopPruner",
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
}
"""Pruner names a study file may use, and the ``optuna.pruners`` class each one builds."""


def _name_and_options(value: Any) -> Any:
    """Turn the file form (``"tpe"`` or ``{name: tpe, <options>}``) into name and options."""
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, Mapping) and not isinstance(value, BaseModel):
        options = {k: v for k, v in value.items() if k != "name"}
        return {"name": value.get("name"), "options": options}
    return value


class _Strategy(_Spec):
    """A name and the keyword options given to its Optuna class."""

    name: Annotated[str, BeforeValidator(_expect_str)]
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the Optuna class. Default {}."
    )

    @field_validator("name")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class SamplerSpec(_Strategy):
    """A sampler name and the keyword options given to its Optuna class.

    In a study file it is written as a name, or as a mapping with ``name`` plus options:
    ``sampler: {name: tpe, n_startup_trials: 5}``.
    """

    name: Annotated[str, BeforeValidator(_expect_str)] = Field(
        description="One of SAMPLER_CLASSES, lower case. Default 'tpe'."
    )


class PrunerSpec(_Strategy):
    """A pruner name and the keyword options given to its Optuna class.

    Written like the sampler: ``pruner: hyperband`` or
    ``pruner: {name: median, n_warmup_steps: 2}``.
    """

    name: Annotated[str, BeforeValidator(_expect_str)] = Field(
        description="One of PRUNER_CLASSES, lower case. Default 'median'."
    )


SCHEDULERS: tuple[str, ...] = ("none", "asha", "pbt")
"""Schedulers that pause, promote or copy trials through their checkpoints."""


def _fraction(value: Any) -> Any:
    value = _expect_float(value)
    if not 0.0 < value <= 0.5:
        raise _fail(f"must be > 0 and <= 0.5, got {value:g}")
    return value


def _perturb(value: Any) -> Any:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _fail(f"expected two factors [down, up] such as [0.8, 1.2], got {_show(value)}")
    down, up = (_expect_float(v) for v in value)
    if not 0.0 < down < 1.0 < up:
        raise _fail(f"expected 0 < down < 1 < up, got [{down:g}, {up:g}]")
    return (down, up)


class AshaSpec(_Spec):
    """Asynchronous successive halving by promotion: trials pause at rungs of
    ``min_epochs * reduction_factor**k`` epochs and resume when promoted."""

    min_epochs: _Int = Field(default=1, ge=1, description="Epochs of the first rung. Default 1.")
    reduction_factor: _Int = Field(
        default=3, ge=2, description="The top 1/reduction_factor of a rung is promoted. Default 3."
    )
    brackets: _AutoOrInt = Field(
        default="auto",
        description=(
            "Brackets (bracket b starts at min_epochs * reduction_factor**b): a number N "
            "spreads trials over N brackets in turn (1: one-bracket asha); auto (the default) "
            "spreads them by how well each rung's ranking predicts the last epoch's, "
            "measured on the study's trials trained without pausing (a study begun with one "
            "bracket goes on with one)."
        ),
    )


class PbtSpec(_Spec):
    """Population-based training: a population trains in intervals; at each interval its
    bottom quantile continues from a top trial's checkpoint with perturbed parameters."""

    population: _Int = Field(default=8, ge=2, description="Trials trained side by side. Default 8.")
    interval_epochs: _Int = Field(
        default=2, ge=1, description="Epochs between two exploit steps. Default 2."
    )
    quantile: Annotated[float, BeforeValidator(_fraction)] = Field(
        default=0.25,
        description="The bottom (and top) fraction of the population, in (0, 0.5]. Default 0.25.",
    )
    perturb: Annotated[tuple[float, float], BeforeValidator(_perturb)] = Field(
        default=(0.8, 1.2),
        description="Factors a numeric parameter is multiplied by, one picked at random. "
        "Default [0.8, 1.2].",
    )
    resample_probability: Annotated[float, BeforeValidator(_expect_float)] = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="Chance a parameter is drawn afresh from the space instead. Default 0.25.",
    )
    mutate: list[str] | None = Field(
        default=None,
        description=(
            "The searched parameters a continuation perturbs; the others are copied from the "
            "trial it continues. Default null: the float parameters (a parameter that shapes "
            "the model, such as a layer width, cannot change under trained weights)."
        ),
    )


class SearchSpec(_Spec):
    """How the search runs: budget, sampler, pruner, scheduler, seed, concurrency, retries."""

    n_trials: _Int = Field(default=20, ge=1, description="Trials to run. Default 20.")
    timeout: _Seconds = Field(
        default=None,
        description=(
            "Stop starting trials after this many seconds ('90s', '30m', '2h', '1d'). "
            "Default null: no limit."
        ),
    )
    sampler: Annotated[SamplerSpec, BeforeValidator(_name_and_options)] = Field(
        default_factory=lambda: SamplerSpec(name="tpe"),
        description=(
            "tpe | random | grid | cmaes | gp | qmc | nsga2, or {name: ..., <options>}. "
            "Default tpe."
        ),
    )
    pruner: Annotated[PrunerSpec, BeforeValidator(_name_and_options)] = Field(
        default_factory=lambda: PrunerSpec(name="median"),
        description=(
            "none | median | percentile | successive_halving | hyperband | pareto (several "
            "objectives: ranks each rung by Pareto fronts; their default), "
            "or {name: ..., <options>}. Default median."
        ),
    )
    scheduler: Annotated[str, BeforeValidator(_choice("scheduler", SCHEDULERS))] = Field(
        default="none",
        description=(
            "none (the pruner decides) | asha (pause at rungs, promote the top) | pbt "
            "(population-based training). Default none; with asha or pbt, pruner must be none."
        ),
    )
    asha: AshaSpec = Field(default_factory=AshaSpec, description="Options of scheduler: asha.")
    pbt: PbtSpec = Field(default_factory=PbtSpec, description="Options of scheduler: pbt.")
    seed: Annotated[int | None, BeforeValidator(_optional(_expect_int))] = Field(
        default=0, description="Sampler seed; null for a random one. Default 0."
    )
    max_concurrent: _AutoOrInt = Field(
        default="auto",
        description=(
            "Trials running at once: 'auto' (one per GPU set; trials under a second also "
            "queue one more on each set) or >= 1 (exactly that many). Default auto."
        ),
    )
    max_retries: _Int = Field(
        default=2, ge=0, description="Retries of a trial whose worker was lost (>= 0). Default 2."
    )
    warm_start: WarmStarts = Field(
        default_factory=list,
        description=(
            "Earlier studies to start from: {from: NAME | RUN_DIR/NAME | storage URL, top_k: "
            "10, history: true}, or a list of them. Default []."
        ),
    )
