"""The objective and tracking sections of a study file, and the names they may use."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from hpsearch import data as _catalog
from hpsearch.spec._messages import (
    _Bytes,
    _choice,
    _Devices,
    _did_you_mean,
    _expect_float,
    _expect_int,
    _fail,
    _Int,
    _optional,
    _OptStr,
    _Seconds,
    _show,
    _Spec,
    _Str,
)
from hpsearch.spec._simulated import SURROGATE_MODELS

BUILTIN_MODELS: tuple[str, ...] = ("cnn", "rnn", "lstm", "gan", "transformer")
"""Models hpsearch can train itself; any other model must be ``package.module:function``."""

BUILTIN_DATASETS: tuple[str, ...] = tuple(_catalog.BUILTIN)
"""Data sets that need no download (see :mod:`hpsearch.data`)."""

USER_OBJECTIVE_METRIC = "value"
"""The metric name of a user objective: the value its function returns."""

_MINIMIZE_SUFFIXES = ("loss", "perplexity", "error", "mmd", "cross_entropy", "time")
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
    gpus_per_trial: _Devices = Field(
        default=1,
        description=(
            "GPUs (or CPU slots) per trial, or a fraction of one (1/2, 1/4, 1/8): that many "
            "trials share a device, each in its own process with its fraction of the device's "
            "memory (and, on CPU slots, of its threads). Default 1."
        ),
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
        if value not in BUILTIN_MODELS + SURROGATE_MODELS:
            known = BUILTIN_MODELS + SURROGATE_MODELS
            raise _fail(
                f"unknown model {value!r}{_did_you_mean(value, known)} "
                f"(built-in: {', '.join(BUILTIN_MODELS)}; "
                f"surrogate benchmarks: {', '.join(SURROGATE_MODELS)}; "
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


class TrackingSpec(_Spec):
    """Where MLflow records go."""

    mlflow_uri: _OptStr = Field(
        default=None,
        description="MLflow tracking URI. Default null: a SQLite store under the run folder.",
    )
    experiment: _OptStr = Field(
        default=None, description="MLflow experiment name. Default null: the study name."
    )
