"""The objective, search and tracking sections of a study file, and the names they may use."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from hpsearch.data import _catalog
from hpsearch.spec._messages import (
    _AutoOrInt,
    _Bytes,
    _choice,
    _did_you_mean,
    _expect_float,
    _expect_int,
    _expect_str,
    _fail,
    _Int,
    _optional,
    _OptStr,
    _Seconds,
    _show,
    _Spec,
    _Str,
)

BUILTIN_MODELS: tuple[str, ...] = ("cnn", "rnn", "lstm", "gan", "transformer")
"""Models hpsearch can train itself; any other model must be ``package.module:function``."""

BUILTIN_DATASETS: tuple[str, ...] = tuple(_catalog.BUILTIN)
"""Data sets that need no download (see :mod:`hpsearch.data`)."""

USER_OBJECTIVE_METRIC = "value"
"""The metric name of a user objective: the value its function returns."""

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

_MINIMIZE_SUFFIXES = ("loss", "perplexity", "error", "mmd")
#: Costs a built-in model reports, minimized unless the file says otherwise.
_MINIMIZE_COSTS = ("params", "train_seconds", "latency_ms", "epoch_s")
_USER_REF_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class Precision(str, Enum):
    """Numeric precision of training; ``auto`` picks bf16, fp16 or fp32 for the device."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    AUTO = "auto"


class Strategy(str, Enum):
    """How a trial's device set trains one model."""

    DDP = "ddp"  # data parallel: every device holds the whole model
    FSDP = "fsdp"  # sharded: parameters, gradients and optimizer state split over the set
    PIPELINE = "pipeline"  # the model cut into stages, one stage per device


class Schedule(str, Enum):
    """The micro-batch schedule of a pipeline."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


def _parallel_shorthand(value: Any) -> Any:
    """``parallel: fsdp`` is ``parallel: {strategy: fsdp}``."""
    return {"strategy": value} if isinstance(value, str) else value


class ParallelSpec(_Spec):
    """How the devices of a trial's set share its model.

    Example:
        >>> ParallelSpec.model_validate({"strategy": "pipeline", "stages": 2}).schedule.value
        '1f1b'
    """

    strategy: Annotated[
        Strategy, BeforeValidator(_choice("strategy", [s.value for s in Strategy]))
    ] = Field(
        default=Strategy.DDP,
        description=(
            "ddp | fsdp | pipeline. Default ddp. ddp: every device holds the whole model and "
            "the gradients are averaged. fsdp: each device holds 1/k of the parameters, "
            "gradients and optimizer state (FSDP2 fully_shard, one unit per layer), gathering "
            "a layer's parameters only while it computes; pick it when the model and its "
            "optimizer state do not fit one device (built-in cnn, rnn, lstm and transformer; "
            "not gan). "
            "The layout may be searched as the space key 'parallel.strategy'."
        ),
    )
    stages: Annotated[int | None, BeforeValidator(_optional(_expect_int))] = Field(
        default=None,
        ge=1,
        description=(
            "Pipeline stages; must divide the trial's set size (k devices, s stages: k/s "
            "pipelines train data-parallel). Default null: one stage per device."
        ),
    )
    microbatches: _Int = Field(
        default=4,
        ge=1,
        description="Micro-batches per batch of a pipeline; must divide the batch. Default 4.",
    )
    schedule: Annotated[
        Schedule, BeforeValidator(_choice("schedule", [s.value for s in Schedule]))
    ] = Field(default=Schedule.ONE_F_ONE_B, description="gpipe | 1f1b. Default 1f1b.")


class Direction(str, Enum):
    """Whether the study maximizes or minimizes its metric."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


def default_direction(metric: str) -> Direction:
    """The direction a metric is optimized in when the file does not say.

    Names ending in ``loss``, ``perplexity``, ``error`` or ``mmd`` are minimized, and so are
    the costs ``params``, ``train_seconds``, ``latency_ms`` and ``epoch_s``; all others
    (``samples_per_s`` too) are maximized.

    Example:
        >>> default_direction("val_loss").value, default_direction("val_accuracy").value
        ('minimize', 'maximize')
    """
    if metric.lower().endswith(_MINIMIZE_SUFFIXES) or metric in _MINIMIZE_COSTS:
        return Direction.MINIMIZE
    return Direction.MAXIMIZE


def _metric_list(value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise _fail(f"expected a list of metric names, got {_show(value)}")
    if len(value) < 2:
        raise _fail(
            f"needs at least 2 metrics, got {len(value)}; for one objective use metric instead"
        )
    if len(set(value)) != len(value):
        raise _fail(f"lists a metric twice: {', '.join(value)}")
    return list(value)


def _direction_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise _fail(f"expected a list of maximize | minimize, got {_show(value)}")
    check = _choice("direction", [d.value for d in Direction])
    return [check(v) for v in value]


def _constraint_map(value: Any) -> Any:
    if not isinstance(value, Mapping):
        raise _fail(
            f"expected a mapping of metric to bounds, e.g. {{params: {{max: 200000}}}}, "
            f"got {_show(value)}"
        )
    out: dict[str, dict[str, float]] = {}
    for metric, bounds in value.items():
        if not isinstance(bounds, Mapping) or not bounds or set(bounds) - {"max", "min"}:
            raise _fail(
                f"{metric}: expected {{max: N}}, {{min: N}} or both, got "
                f"{_show(bounds) if not isinstance(bounds, Mapping) else dict(bounds)}"
            )
        out[str(metric)] = {}
        for key, bound in bounds.items():
            if isinstance(bound, bool) or not isinstance(bound, (int, float)):
                raise _fail(f"{metric}.{key}: expected a number, got {_show(bound)}")
            out[str(metric)][key] = float(bound)
    return out


def _check_params(value: Any) -> Any:
    if not isinstance(value, Mapping):
        raise _fail(f"expected a mapping of fixed hyperparameters, got {_show(value)}")

    def plain(item: Any) -> bool:
        if item is None or isinstance(item, (bool, int, float, str)):
            return True
        if isinstance(item, (list, tuple)):
            return all(plain(x) for x in item)
        return isinstance(item, Mapping) and all(
            isinstance(k, str) and plain(v) for k, v in item.items()
        )

    for key, item in value.items():
        if not plain(item):
            raise _fail(f"{key}: expected a scalar, list or mapping of scalars, got {_show(item)}")
    return dict(value)


class ObjectiveSpec(_Spec):
    """What each trial trains and reports.

    Example:
        >>> ObjectiveSpec(model="cnn").epochs
        10
    """

    model: _Str = Field(
        description=(
            "A built-in model name (see BUILTIN_MODELS) or a user objective "
            "'package.module:function'. Required."
        )
    )
    dataset: str | dict[str, Any] = Field(
        default="digits",
        description=(
            "A built-in data set name, or a mapping such as {name: digits, size: 28} or "
            "{path: data.npz}. Default 'digits'. Ignored for a user objective."
        ),
    )
    metric: _OptStr = Field(
        default=None,
        description=(
            "The metric reported every epoch and optimized. Default null: the model's default "
            "on the data set: val_accuracy for a classifier, val_perplexity for an LSTM on a "
            "text corpus, val_mmd for the GAN; 'value' for a user objective."
        ),
    )
    direction: Annotated[
        Direction | None,
        BeforeValidator(_optional(_choice("direction", [d.value for d in Direction]))),
    ] = Field(
        default=None,
        description=(
            "maximize | minimize. Default null: minimize for metrics ending in loss, perplexity, "
            "error or mmd, maximize otherwise."
        ),
    )
    metrics: Annotated[list[str] | None, BeforeValidator(_optional(_metric_list))] = Field(
        default=None,
        description=(
            "Several metrics optimized at once (a multi-objective study), e.g. [val_accuracy, "
            "params]; use metric for one. Built-in models also report params, train_seconds, "
            "samples_per_s and latency_ms. Default null."
        ),
    )
    directions: Annotated[list[Direction] | None, BeforeValidator(_optional(_direction_list))] = (
        Field(
            default=None,
            description=(
                "One direction per entry of metrics (maximize | minimize). Default null: each "
                "derived from its metric's name, as for direction."
            ),
        )
    )
    constraints: Annotated[
        dict[str, dict[str, float]] | None, BeforeValidator(_optional(_constraint_map))
    ] = Field(
        default=None,
        description=(
            "Bounds a trial must meet to count, by metric: {params: {max: 200000}} or "
            "{val_accuracy: {min: 0.9}}. Optuna's constraints: infeasible trials are never on "
            "the Pareto front (or best), and samplers prefer feasible ones. Default null."
        ),
    )
    epochs: _Int = Field(
        default=10,
        ge=1,
        description="Epochs per trial; one report per epoch (the pruning resource). Default 10.",
    )
    precision: Annotated[
        Precision, BeforeValidator(_choice("precision", [p.value for p in Precision]))
    ] = Field(default=Precision.AUTO, description="fp32 | bf16 | fp16 | auto. Default auto.")
    gpus_per_trial: _Int = Field(
        default=1, ge=1, description="GPUs (or CPU slots) per trial. Default 1."
    )
    parallel: Annotated[ParallelSpec, BeforeValidator(_parallel_shorthand)] = Field(
        default_factory=ParallelSpec,
        description=(
            "How a trial's devices share its model: ddp, fsdp or pipeline, or a mapping "
            "{strategy, stages, microbatches, schedule}. Default ddp."
        ),
    )
    max_memory_per_device: _Bytes = Field(
        default=None,
        description=(
            "Memory one device of a built-in trial may use: bytes, or '512MiB', '2GiB', "
            "'1.5GB'. On CUDA the caching allocator is capped at it "
            "(torch.cuda.set_per_process_memory_fraction); on CPU hpsearch counts each rank's "
            "parameters, gradients and optimizer state after the first optimizer step. A "
            "trial over it fails as 'out of memory: ...' (TrialOutOfMemory). Default null: "
            "no limit."
        ),
    )
    params: Annotated[dict[str, Any], BeforeValidator(_check_params)] = Field(
        default_factory=dict, description="Fixed hyperparameters, not searched. Default {}."
    )
    trial_timeout: _Seconds = Field(
        default=None,
        description=(
            "Seconds (or '90s', '30m', '2h', '1d') one trial may run. Default null: no limit."
        ),
    )
    checkpoint_interval: Annotated[float | None, BeforeValidator(_optional(_expect_float))] = Field(
        default=5.0,
        ge=0.0,
        description=(
            "Seconds between a built-in trial's checkpoints: one is written at the end of an "
            "epoch when this long has passed since the last (the first epoch always writes "
            "one). 0 writes one every epoch; null writes none (a lost trial starts again from "
            "scratch). Default 5: a killed trial loses at most about 5 s of work, and fast "
            "epochs do not pay for a checkpoint each."
        ),
    )

    @field_validator("model")
    @classmethod
    def _check_model(cls, value: str) -> str:
        if ":" in value:
            if not _USER_REF_RE.match(value):
                raise _fail(
                    f"{value!r} is not of the form 'package.module:function' for a user objective"
                )
            return value
        if value not in BUILTIN_MODELS:
            raise _fail(
                f"unknown model {value!r}{_did_you_mean(value, BUILTIN_MODELS)} "
                f"(built-in: {', '.join(BUILTIN_MODELS)}; "
                "or a user objective as 'package.module:function')"
            )
        return value

    @field_validator("dataset", mode="before")
    @classmethod
    def _check_dataset(cls, value: Any) -> Any:
        # Whether the name is a built-in is checked with the whole study (see _collect), so
        # that it is reported even when the model name is wrong too.
        if isinstance(value, Mapping):
            return dict(value)
        if not isinstance(value, str):
            raise _fail(f"expected a data set name or a mapping, got {_show(value)}")
        return value


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
    brackets: _Int = Field(
        default=1,
        ge=1,
        description=(
            "Brackets (bracket b starts at min_epochs * reduction_factor**b); trials are "
            "spread over them in turn. Default 1."
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
        description="Trials in flight at once: 'auto' (one per GPU set) or >= 1. Default auto.",
    )
    max_retries: _Int = Field(
        default=2, ge=0, description="Retries of a trial whose worker was lost (>= 0). Default 2."
    )


class TrackingSpec(_Spec):
    """Where MLflow records go."""

    mlflow_uri: _OptStr = Field(
        default=None,
        description="MLflow tracking URI. Default null: a SQLite store under the run folder.",
    )
    experiment: _OptStr = Field(
        default=None, description="MLflow experiment name. Default null: the study name."
    )
