"""The typed study spec: what a study file may say, its defaults, and its validation.

A study file is read once with ``yaml.safe_load`` and turned into a frozen
:class:`StudySpec`. Every problem in the file is collected before anything is raised, and each
becomes one line of a :class:`~hpsearch.exceptions.SpecError` of the form
``<file>: <dotted.field>: <message>``, saying the rule, the value and, where the right
spelling is known, the fix.

Example:
    >>> spec = StudySpec.from_dict(
    ...     {
    ...         "name": "quickstart",
    ...         "objective": {"model": "cnn", "epochs": 3},
    ...         "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
    ...     },
    ...     overrides={"n_trials": 4},
    ... )
    >>> spec.search.n_trials, spec.metric, spec.direction.value
    (4, 'val_accuracy', 'maximize')

This module imports neither Optuna nor torch at import time; Optuna is imported only to check
sampler or pruner options against its constructors.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hpsearch.data import _catalog
from hpsearch.exceptions import SpecError

__all__ = [
    "BUILTIN_DATASETS",
    "BUILTIN_MODELS",
    "DEFAULT_METRICS",
    "OVERRIDE_ALIASES",
    "PRUNER_CLASSES",
    "SAMPLER_CLASSES",
    "AdaptSpec",
    "CategoricalParam",
    "ClusterSpec",
    "Direction",
    "FloatParam",
    "IntParam",
    "KubernetesSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "Precision",
    "PrunerSpec",
    "SamplerSpec",
    "SearchSpec",
    "SlurmSpec",
    "StudySpec",
    "TlsSpec",
    "TrackingSpec",
    "default_direction",
    "load_user_objective",
    "parse_duration",
]

BUILTIN_MODELS: tuple[str, ...] = ("cnn", "rnn", "lstm", "gan")
"""Models hpsearch can train itself; any other model must be ``package.module:function``."""

BUILTIN_DATASETS: tuple[str, ...] = tuple(_catalog.BUILTIN)
"""Data sets that need no download (see :mod:`hpsearch.data`)."""

DEFAULT_METRICS: dict[str, str] = {
    "cnn": "val_accuracy",
    "rnn": "val_accuracy",
    "lstm": "val_accuracy",
    "gan": "val_mmd",
}
"""The metric each built-in model optimizes when ``objective.metric`` is not given, on a
classification data set; an LSTM on a text corpus (a language model) optimizes
``val_perplexity``."""

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

# Constructor arguments hpsearch fills in itself, with the hint shown when a file sets them.
_SAMPLER_OWNED_OPTIONS: dict[str, str] = {
    "seed": "set search.seed instead",
    "search_space": "the grid is built from space",
}

# Constructor arguments whose values are Python objects (callables, samplers, trials), which a
# YAML file cannot express; recognised by their annotation.
_OBJECT_ANNOTATIONS = ("Callable", "Sampler", "Mutation", "Crossover", "FrozenTrial")

OVERRIDE_ALIASES: dict[str, str] = {
    "n_trials": "search.n_trials",
    "timeout": "search.timeout",
    "seed": "search.seed",
    "max_concurrent": "search.max_concurrent",
    "n_workers": "cluster.n_workers",
    "scheduler": "cluster.scheduler",
    "gpus": "cluster.gpus",
    "mlflow_uri": "tracking.mlflow_uri",
    "experiment": "tracking.experiment",
    "storage": "storage",
    "epochs": "objective.epochs",
    "precision": "objective.precision",
}
"""Short override names (as the CLI flags use them) and the dotted key each one sets."""

_MINIMIZE_SUFFIXES = ("loss", "perplexity", "error", "mmd")
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_USER_REF_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_NO_FILE = "<study>"


class Precision(str, Enum):
    """Numeric precision of training; ``auto`` picks bf16, fp16 or fp32 for the device."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    AUTO = "auto"


class Direction(str, Enum):
    """Whether the study maximizes or minimizes its metric."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


# --------------------------------------------------------------------------- message helpers


def _did_you_mean(word: str, allowed: Sequence[str]) -> str:
    matches = difflib.get_close_matches(word, list(allowed), n=1, cutoff=0.6)
    return f"; did you mean '{matches[0]}'?" if matches else ""


def _allowed(allowed: Sequence[str]) -> str:
    return f"(allowed: {', '.join(allowed)})"


def _show(value: Any) -> str:
    """Show a value in a message: scalars as ``repr``, containers by kind."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return repr(value)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else _show(value)


def _fail(message: str) -> PydanticCustomError:
    # The message travels in the context so that braces in user values are never templated.
    return PydanticCustomError("hpsearch", "{message}", {"message": message})


# ------------------------------------------------------------------------ scalar validators


def _expect_int(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"expected an integer, got {_show(value)}")
    return value


def _expect_float(value: Any) -> Any:
    # PyYAML reads ``1e-4`` (no dot) as a string, so numeric strings are accepted here.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(f"expected a number, got {_show(value)}")
    return float(value)


def _expect_bool(value: Any) -> Any:
    if not isinstance(value, bool):
        raise _fail(f"expected true or false, got {_show(value)}")
    return value


def _expect_str(value: Any) -> Any:
    if not isinstance(value, str):
        raise _fail(f"expected a string, got {_show(value)}")
    return value


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check_optional(value: Any) -> Any:
        return None if value is None else check(value)

    return check_optional


def _auto_or_positive_int(value: Any) -> Any:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise _fail(f"expected 'auto' or an integer >= 1, got {_show(value)}")


def parse_duration(value: Any) -> float | None:
    """Normalise a duration to seconds.

    Args:
        value: None, a number of seconds, or a string ``<number>[s|m|h|d]`` such as ``"90s"``,
            ``"30m"``, ``"2h"``, ``"1.5d"`` or ``"45"`` (seconds).

    Returns:
        The duration in seconds as a float, or None when ``value`` is None.

    Raises:
        ValueError: The value is not one of the forms above, or not > 0.

    Example:
        >>> parse_duration("30m"), parse_duration(90), parse_duration(None)
        (1800.0, 90.0, None)
    """
    if value is None:
        return None
    if isinstance(value, str):
        match = _DURATION_RE.match(value.strip())
        if match is None:
            raise ValueError(
                f"expected seconds or a duration such as '90s', '30m', '2h' or '1d', got {value!r}"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(
            f"expected seconds or a duration such as '90s', '30m', '2h' or '1d', got {_show(value)}"
        )
    if not seconds > 0:
        raise ValueError(f"must be > 0 seconds, got {value!r}")
    return seconds


def _duration(value: Any) -> Any:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _choice(kind: str, allowed: Sequence[str]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, Enum):
            value = value.value
        if not isinstance(value, str):
            raise _fail(f"expected one of {', '.join(allowed)}, got {_show(value)}")
        if value.lower() not in allowed:
            hint = _did_you_mean(value, allowed)
            raise _fail(f"unknown {kind} {value!r}{hint} {_allowed(allowed)}")
        return value.lower()

    return check


_Int = Annotated[int, BeforeValidator(_expect_int)]
_Float = Annotated[float, BeforeValidator(_expect_float)]
_Bool = Annotated[bool, BeforeValidator(_expect_bool)]
_Str = Annotated[str, BeforeValidator(_expect_str)]
_OptStr = Annotated[str | None, BeforeValidator(_optional(_expect_str))]
_Seconds = Annotated[float | None, BeforeValidator(_duration)]
_AutoOrInt = Annotated[Literal["auto"] | int, BeforeValidator(_auto_or_positive_int)]
CategoricalChoice = Union[None, bool, int, float, str]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------ search space


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


# ---------------------------------------------------------------------------------- sections


def default_direction(metric: str) -> Direction:
    """The direction a metric is optimized in when the file does not say.

    Names ending in ``loss``, ``perplexity``, ``error`` or ``mmd`` are minimized, all others
    maximized.

    Example:
        >>> default_direction("val_loss").value, default_direction("val_accuracy").value
        ('minimize', 'maximize')
    """
    if metric.lower().endswith(_MINIMIZE_SUFFIXES):
        return Direction.MINIMIZE
    return Direction.MAXIMIZE


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
            "(see DEFAULT_METRICS; 'value' for a user objective)."
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
    params: Annotated[dict[str, Any], BeforeValidator(_check_params)] = Field(
        default_factory=dict, description="Fixed hyperparameters, not searched. Default {}."
    )
    trial_timeout: _Seconds = Field(
        default=None,
        description=(
            "Seconds (or '90s', '30m', '2h', '1d') one trial may run. Default null: no limit."
        ),
    )
    checkpoint_interval: Annotated[
        float | None, BeforeValidator(_optional(_expect_float))
    ] = Field(
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


class SearchSpec(_Spec):
    """How the search runs: budget, sampler, pruner, seed, concurrency, retries."""

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
            "none | median | percentile | successive_halving | hyperband, "
            "or {name: ..., <options>}. Default median."
        ),
    )
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


def _check_gpus(value: Any) -> Any:
    if value in ("auto", "none"):
        return value
    if not isinstance(value, (list, tuple)):
        raise _fail(f"expected 'auto', 'none' or a list of GPU indices, got {_show(value)}")
    for gpu in value:
        if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
            raise _fail(f"GPU indices must be non-negative integers, got {_show(gpu)}")
    duplicates = sorted({gpu for gpu in value if list(value).count(gpu) > 1})
    if duplicates:
        raise _fail(f"GPU indices must be distinct, got {', '.join(map(str, duplicates))} twice")
    return list(value)


class SlurmSpec(_Spec):
    """Workers as SLURM jobs (dask-jobqueue's ``SLURMCluster``): one job per node, one worker
    per GPU set of the node."""

    queue: _Str = Field(description="The partition (#SBATCH -p). Required.")
    account: _OptStr = Field(default=None, description="The account (#SBATCH -A). Default null.")
    walltime: _Str = Field(
        default="01:00:00", description="Each job's time limit (#SBATCH -t). Default 01:00:00."
    )
    jobs: _Int = Field(default=1, ge=1, description="Jobs (nodes) to start. Default 1.")
    gpus_per_node: _Int = Field(
        default=1, ge=0, description="GPUs of each node (--gres=gpu:N). Default 1."
    )
    cores: _Int = Field(default=8, ge=1, description="CPU cores per job. Default 8.")
    memory: _Str = Field(default="32GB", description="Memory per job. Default 32GB.")
    job_script_prologue: list[_Str] = Field(
        default_factory=list,
        description="Shell lines before the worker starts (module loads, venv). Default [].",
    )
    job_extra_directives: list[_Str] = Field(
        default_factory=list,
        description="More #SBATCH options, e.g. ['--constraint=a100']. Default [].",
    )
    python: _OptStr = Field(
        default=None, description="The Python on the nodes. Default: this one's path."
    )


class KubernetesSpec(_Spec):
    """Workers as pods of a Dask Kubernetes operator cluster (dask-kubernetes)."""

    image: _Str = Field(
        description="The container image, with hpsearch and torch installed. Required."
    )
    namespace: _Str = Field(default="default", description="The namespace. Default 'default'.")
    workers: _Int = Field(default=1, ge=1, description="Worker pods. Default 1.")
    gpus_per_worker: _Int = Field(
        default=1, ge=0, description="nvidia.com/gpu limit of each worker pod. Default 1."
    )
    cpu: _Str = Field(default="4", description="CPU limit of each worker pod. Default 4.")
    memory: _Str = Field(default="16G", description="Memory limit of each worker pod. Default 16G.")
    env: dict[str, _Str] = Field(
        default_factory=dict, description="Environment of the pods. Default {}."
    )


class TlsSpec(_Spec):
    """Certificates for the Dask scheduler, workers and client (``distributed.Security``)."""

    ca_file: _Str = Field(
        description="The CA certificate that signed every certificate (PEM). Required."
    )
    cert: _Str = Field(description="This machine's certificate (PEM). Required.")
    key: _Str = Field(description="Its private key (PEM). Required.")


class AdaptSpec(_Spec):
    """Adaptive scaling of a SLURM or Kubernetes cluster: workers come and go between these."""

    minimum: _Int = Field(default=0, ge=0, description="Fewest jobs (SLURM) or pods. Default 0.")
    maximum: _Int = Field(ge=1, description="Most jobs (SLURM) or pods. Required.")


class ClusterSpec(_Spec):
    """Where trials run."""

    scheduler: _OptStr = Field(
        default=None,
        description="Address of an existing Dask scheduler. Default null: start a local cluster.",
    )
    n_workers: _AutoOrInt = Field(
        default="auto",
        description="Workers to start: 'auto' (one per GPU set) or >= 1. Default auto.",
    )
    gpus: Annotated[Literal["auto", "none"] | list[int], BeforeValidator(_check_gpus)] = (
        Field(
            default="auto",
            description=(
                "'auto' (all visible), 'none' (CPU only) or a list of distinct GPU indices. "
                "Default auto."
            ),
        )
    )
    slots: _AutoOrInt = Field(
        default="auto",
        description=(
            "CPU slots of the local cluster where it has no GPUs (a trial of gpus_per_trial=k "
            "takes k slots, one rank each): 'auto' (one per core) or >= 1. Default auto."
        ),
    )
    backend: Annotated[
        str, BeforeValidator(_choice("backend", ["local", "slurm", "kubernetes"]))
    ] = Field(
        default="local",
        description=(
            "local (worker processes on this machine, or cluster.scheduler's workers), slurm or "
            "kubernetes. Default local."
        ),
    )
    slurm: SlurmSpec | None = Field(
        default=None, description="SLURM settings (backend: slurm)."
    )
    kubernetes: KubernetesSpec | None = Field(
        default=None, description="Kubernetes settings (backend: kubernetes)."
    )
    adapt: AdaptSpec | None = Field(
        default=None, description="Adaptive scaling (slurm, kubernetes). Default null: fixed size."
    )
    storage_access: Annotated[
        str, BeforeValidator(_choice("storage_access", ["proxy", "direct"]))
    ] = Field(
        default="proxy",
        description=(
            "How workers reach the Optuna study: proxy (through the coordinator's gRPC storage "
            "proxy: no database access or credentials on the workers) or direct (each worker "
            "opens the database URL in storage itself). Default proxy."
        ),
    )
    tls: Literal["auto"] | TlsSpec | None = Field(
        default=None,
        description=(
            "TLS between the coordinator, the scheduler and the workers: null (none; the local "
            "cluster listens on 127.0.0.1 only), 'auto' (a temporary self-signed setup for the "
            "local cluster) or {ca_file, cert, key}. Default null."
        ),
    )


def _check_backend(cluster: Any, problems: Any, storage: Any = None) -> None:
    if cluster is None:
        return
    for name in ("slurm", "kubernetes"):
        if cluster.backend == name and getattr(cluster, name) is None:
            problems.add(f"cluster.{name}", f"required with backend: {name}")
        if cluster.backend != name and getattr(cluster, name) is not None:
            problems.add(
                f"cluster.{name}", f"only used with backend: {name} (backend is {cluster.backend})"
            )
    if cluster.adapt is not None:
        if cluster.backend == "local":
            problems.add("cluster.adapt", "only slurm and kubernetes clusters adapt")
        elif cluster.adapt.minimum > cluster.adapt.maximum:
            problems.add(
                "cluster.adapt",
                f"minimum ({cluster.adapt.minimum}) must be <= maximum ({cluster.adapt.maximum})",
            )
    if cluster.tls == "auto" and (cluster.scheduler or cluster.backend != "local"):
        problems.add(
            "cluster.tls",
            "'auto' is for the local cluster only; give {ca_file, cert, key} for other machines",
        )
    if isinstance(cluster.tls, TlsSpec):
        for name in ("ca_file", "cert", "key"):
            if not Path(os.path.expanduser(getattr(cluster.tls, name))).is_file():
                problems.add(f"cluster.tls.{name}", f"no such file: {getattr(cluster.tls, name)}")
    if cluster.storage_access == "direct" and (
        storage is None
        or str(storage).startswith("journal://")
        or str(storage).endswith(".journal")
    ):
        problems.add(
            "cluster.storage_access",
            "direct needs a database URL in storage (e.g. postgresql+psycopg://...); a journal file stays with the coordinator",
        )
    if cluster.backend != "local" and cluster.scheduler:
        problems.add(
            "cluster.scheduler",
            f"not used with backend: {cluster.backend} (it starts its own scheduler)",
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


# ------------------------------------------------------------------------------- user objective


_IMPORT_LOCK = threading.Lock()


@contextmanager
def _prepended_sys_path(paths: Sequence[str | Path]) -> Iterator[None]:
    saved = list(sys.path)
    sys.path[:0] = [os.path.abspath(p) for p in paths]
    for _ in range(10):
        try:
            importlib.invalidate_caches()
            break
        except RuntimeError:  # another thread imported meanwhile (the cache grew): again
            continue
    try:
        yield
    finally:
        sys.path[:] = saved


def load_user_objective(ref: str, search_paths: Sequence[str | Path]) -> Callable[..., Any]:
    """Import a user objective ``package.module:function``.

    ``search_paths`` are put in front of ``sys.path`` for the import only (``sys.path`` is
    restored afterwards; the imported module stays in ``sys.modules``). The coordinator uses
    ``[cwd, study file folder]``; a worker passes the same folders.

    Args:
        ref: ``package.module:function``; the function part may be a dotted attribute path.
        search_paths: Folders searched first.

    Returns:
        The callable.

    Raises:
        SpecError: With one line ``objective.model: <reason>``. When the import itself failed,
            the original exception (e.g. ``ModuleNotFoundError``) is its ``__cause__``.

    Example:
        >>> load_user_objective("os.path:join", [])("a", "b")
        'a/b'
    """
    module_name, _, attr_path = ref.partition(":")
    try:
        module = sys.modules.get(module_name)
        if module is None:
            # One import at a time: trials start on several threads of a worker, and the
            # sys.path change below is process-wide.
            with _IMPORT_LOCK, _prepended_sys_path(search_paths):
                module = importlib.import_module(module_name)
    except Exception as exc:
        raise SpecError(
            f"objective.model: cannot import {ref!r} ({type(exc).__name__}: {exc})"
        ) from exc
    target: Any = module
    for attr in attr_path.split("."):
        if not hasattr(target, attr):
            raise SpecError(
                f"objective.model: module {module_name!r} has no function {attr_path!r}"
            )
        target = getattr(target, attr)
    if not callable(target):
        raise SpecError(f"objective.model: {ref!r} is not callable")
    return target


# -------------------------------------------------------------------------------- validation


class _Problems:
    """Collects ``(dotted field, message)`` pairs and renders them as lines for one file."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: list[str] = []

    def add(self, field: str, message: str) -> None:
        where = f"{self.label}: {field}" if field else self.label
        self.lines.append(f"{where}: {message}")

    def unknown_keys(self, field: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
        for key in given:
            if key not in allowed:
                where = f"{field}.{key}" if field else str(key)
                hint = _did_you_mean(str(key), allowed)
                self.add(where, f"unknown key{hint} {_allowed(allowed)}")

    def validate(self, model: type[_Spec], data: Any, field: str) -> Any:
        """Validate one section; record its problems and return the model, or None."""
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                self.add(_join(field, error["loc"]), _message(error, model))
            return None


def _join(field: str, loc: Sequence[int | str]) -> str:
    return ".".join([field, *(str(part) for part in loc)] if field else [str(p) for p in loc])


def _fields(model: type[BaseModel]) -> list[str]:
    return [name for name in model.model_fields if name != "source"]


def _message(error: Any, model: type[_Spec]) -> str:
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "hpsearch":
        return str(ctx["message"])
    if kind == "extra_forbidden":
        allowed = _fields(model)
        return f"unknown key{_did_you_mean(str(error['loc'][-1]), allowed)} {_allowed(allowed)}"
    if kind == "missing":
        return "required"
    if kind in ("greater_than_equal", "greater_than"):
        sign, bound = (">=", ctx["ge"]) if kind == "greater_than_equal" else (">", ctx["gt"])
        return f"must be {sign} {_number(bound)}, got {_number(value)}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping, got {_show(value)}"
    return f"{error['msg']}, got {_show(value)}"


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


def _check_options(
    kind: str,
    name: str,
    options: Mapping[str, Any],
    class_name: str,
    field: str,
    problems: _Problems,
) -> None:
    import optuna

    module = optuna.samplers if kind == "sampler" else optuna.pruners
    parameters = inspect.signature(getattr(module, class_name)).parameters
    owned = _SAMPLER_OWNED_OPTIONS if kind == "sampler" else {}
    settable = [p for p in parameters if p not in owned]
    for option in options:
        where = f"{field}.{option}"
        if option in owned and option in parameters:
            problems.add(where, f"hpsearch sets {option!r} itself; {owned[option]}")
        elif option not in parameters:
            if not settable:
                problems.add(where, f"the {name} {kind} takes no options")
            else:
                problems.add(
                    where,
                    f"unknown option for the {name} {kind} ({module.__name__}.{class_name})"
                    f"{_did_you_mean(option, settable)} {_allowed(settable)}",
                )
        elif any(word in str(parameters[option].annotation) for word in _OBJECT_ANNOTATIONS):
            problems.add(where, "takes a Python object and cannot be set in a study file")


def _check_strategy(
    kind: str, spec: SamplerSpec | PrunerSpec, classes: Mapping[str, str], problems: _Problems
) -> bool:
    field = f"search.{kind}"
    if spec.name not in classes:
        allowed = list(classes)
        hint = _did_you_mean(spec.name, allowed)
        problems.add(field, f"unknown {kind} {spec.name!r}{hint} {_allowed(allowed)}")
        return False
    if spec.options:
        _check_options(kind, spec.name, spec.options, classes[spec.name], field, problems)
    return True


def _validate_strategies(raw_search: Any, problems: _Problems) -> dict[str, Any]:
    """Validate ``search.sampler`` and ``search.pruner``; a broken one maps to None."""
    if isinstance(raw_search, SearchSpec):
        return {"sampler": raw_search.sampler, "pruner": raw_search.pruner}
    if not isinstance(raw_search, Mapping):
        return {}
    built: dict[str, Any] = {}
    for key, model in (("sampler", SamplerSpec), ("pruner", PrunerSpec)):
        if key not in raw_search:
            continue
        raw = raw_search[key]
        if isinstance(raw, (str, Mapping, BaseModel)):
            built[key] = problems.validate(model, _name_and_options(raw), f"search.{key}")
        else:
            problems.add(
                f"search.{key}",
                f"expected a {key} name or a mapping {{name: ..., <options>}}, got {_show(raw)}",
            )
            built[key] = None
    return built


def _check_sampler(
    sampler: SamplerSpec, space: Mapping[str, Any], space_ok: bool, problems: _Problems
) -> None:
    if not _check_strategy("sampler", sampler, SAMPLER_CLASSES, problems):
        return
    if sampler.name == "cmaes" and importlib.util.find_spec("cmaes") is None:
        problems.add(
            "search.sampler", "the cmaes sampler needs the 'cmaes' package; pip install cmaes"
        )
    if sampler.name == "grid":
        if space_ok and not space:
            problems.add("search.sampler", "the grid sampler needs a non-empty space")
        for name, param in space.items():
            if isinstance(param, FloatParam) and param.step is None:
                problems.add(
                    f"space.{name}",
                    "the grid sampler needs a finite set of values: give this float a step, "
                    "or make it int or categorical",
                )


def _check_dataset_for(raw: Mapping[str, Any], source: Path | None, problems: _Problems) -> None:
    """The data set of a built-in model: known, readable, with known options, fit for the
    model, and the metric one the model reports on it."""
    model, dataset, metric = raw.get("model"), raw.get("dataset", "digits"), raw.get("metric")
    if not isinstance(model, str) or ":" in model or model not in BUILTIN_MODELS:
        return  # a user objective reads its own data; a bad model is reported already
    if isinstance(dataset, str) and ":" not in dataset and dataset not in BUILTIN_DATASETS:
        problems.add(
            "objective.dataset",
            f"unknown dataset {dataset!r}{_did_you_mean(dataset, BUILTIN_DATASETS)} "
            f"{_allowed(BUILTIN_DATASETS)}, a mapping {{path: data.npz}} or {{path: corpus.txt}}, "
            "or 'package.module:function'",
        )
        return
    if isinstance(dataset, Mapping):
        loader, allowed = _catalog.option_keys(dataset)
        if "path" not in dataset and dataset.get("name") not in BUILTIN_DATASETS:
            name = dataset.get("name")
            problems.add(
                "objective.dataset.name" if name is not None else "objective.dataset",
                f"unknown dataset {name!r} {_allowed(BUILTIN_DATASETS)}"
                if name is not None
                else "a mapping needs 'name' (a built-in data set) or 'path' (your .npz or .txt file)",
            )
            return
        problems.unknown_keys("objective.dataset", dataset, allowed)
    elif isinstance(dataset, str) and ":" in dataset:
        paths = [Path.cwd()] + ([source.parent] if source is not None else [])
        try:
            load_user_objective(dataset, paths)
        except SpecError as exc:
            for line in exc.problems:
                problems.add("objective.dataset", line.partition(": ")[2])
            return
    elif not isinstance(dataset, (str, Mapping)):
        return  # reported by the field's own check
    try:
        info = _catalog.describe(dataset, source=source)
    except ValueError as exc:
        field = (
            "objective.dataset.path"
            if isinstance(dataset, Mapping) and "path" in dataset
            else "objective.dataset"
        )
        problems.add(field, str(exc))
        return
    why = _catalog.check_for_model(info, model)
    if why is not None:
        problems.add("objective.dataset", why)
        return
    reported = _catalog.metrics_of(model, info.task)
    if isinstance(metric, str) and metric not in reported:
        problems.add(
            "objective.metric",
            f"model {model!r} does not report {metric!r} on this data set "
            f"(it reports: {', '.join(reported)})",
        )


def _collect(data: Any, label: str, source: Path | None) -> dict[str, Any]:
    """Validate raw study data section by section; raise one SpecError with every problem."""
    problems = _Problems(label)
    if not isinstance(data, Mapping):
        problems.add("", f"the study file must be a mapping of keys, got {_show(data)}")
        raise SpecError(problems.lines)
    problems.unknown_keys("", data, _fields(StudySpec))
    out: dict[str, Any] = {"source": source}

    name = data.get("name")
    if name is None:
        problems.add("name", "required; give the study a name of letters, digits, '-', '_', '.'")
    elif not isinstance(name, str) or not _NAME_RE.match(name):
        problems.add(
            "name", f"must contain only letters, digits, '-', '_' and '.', got {_show(name)}"
        )
    out["name"] = name

    storage = data.get("storage")
    if storage is not None and not isinstance(storage, str):
        problems.add("storage", f"expected an Optuna storage URL, got {_show(storage)}")
    out["storage"] = storage

    strategies = _validate_strategies(data.get("search"), problems)
    sections: dict[str, type[_Spec]] = {
        "objective": ObjectiveSpec,
        "search": SearchSpec,
        "cluster": ClusterSpec,
        "tracking": TrackingSpec,
    }
    for key, model in sections.items():
        raw = data.get(key)
        if raw is None and key == "objective":
            problems.add("objective", "required; at least objective.model")
            out[key] = None
            continue
        if raw is None:
            raw = {}
        if key == "search" and isinstance(raw, Mapping):
            # Sampler and pruner were validated on their own (so that their option checks run
            # even when another search field is wrong); a broken one is already reported.
            raw = {k: v for k, v in raw.items() if k not in ("sampler", "pruner")}
            raw.update({k: v for k, v in strategies.items() if v is not None})
        out[key] = problems.validate(model, raw, key)

    _check_backend(out.get("cluster"), problems, out.get("storage"))
    raw_space = data.get("space")
    raw_space = {} if raw_space is None else raw_space
    space = _validate_space(raw_space, problems)
    space_ok = isinstance(raw_space, Mapping) and len(space) == len(raw_space)
    out["space"] = space

    raw_objective = data.get("objective")
    raw_params = raw_objective.get("params") if isinstance(raw_objective, Mapping) else None
    if isinstance(raw_params, Mapping) and isinstance(raw_space, Mapping):
        for key in raw_space:
            if key in raw_params:
                problems.add(
                    f"space.{key}",
                    "also fixed in objective.params; a hyperparameter is either searched or "
                    "fixed, remove it from one",
                )
    if isinstance(raw_objective, Mapping):
        _check_dataset_for(raw_objective, source, problems)
    objective: ObjectiveSpec | None = out["objective"]
    if objective is not None:
        if ":" in objective.model:
            paths = [Path.cwd()] + ([source.parent] if source is not None else [])
            try:
                load_user_objective(objective.model, paths)
            except SpecError as exc:
                for line in exc.problems:
                    field, _, message = line.partition(": ")
                    problems.add(field, message)
        elif space_ok and not space:
            problems.add(
                "space",
                f"the built-in model {objective.model!r} needs at least one searched "
                "hyperparameter",
            )
    sampler = strategies.get("sampler", SamplerSpec(name="tpe"))
    if sampler is not None:
        _check_sampler(sampler, space, space_ok, problems)
    pruner = strategies.get("pruner")
    if pruner is not None:
        _check_strategy("pruner", pruner, PRUNER_CLASSES, problems)

    if problems.lines:
        raise SpecError(problems.lines)
    return out


# ------------------------------------------------------------------------------- overrides


def _override_keys() -> list[str]:
    keys = [*OVERRIDE_ALIASES]
    for name, info in StudySpec.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += [f"{name}.{field}" for field in _fields(annotation)]
        elif name != "source":
            keys.append(name)
    return keys


def _apply_overrides(
    data: dict[str, Any], overrides: Mapping[str, Any], problems: _Problems
) -> None:
    """Set each given override in ``data`` (in place); record unknown keys as problems."""
    valid = _override_keys()
    for key, value in overrides.items():
        if value is None:
            continue
        dotted = OVERRIDE_ALIASES.get(key, key)
        parts = dotted.split(".")
        free = parts[0] == "space" or parts[:2] == ["objective", "params"]
        if not (dotted in valid or (free and len(parts) > (1 if parts[0] == "space" else 2))):
            problems.add(
                key,
                f"unknown override{_did_you_mean(key, valid)} "
                f"(allowed: {', '.join(OVERRIDE_ALIASES)}, "
                "or a dotted key such as search.n_trials or objective.params.batch_size)",
            )
            continue
        target = data
        for part in parts[:-1]:
            if not isinstance(target.get(part), dict):
                target[part] = dict(target[part]) if isinstance(target.get(part), Mapping) else {}
            target = target[part]
        target[parts[-1]] = value


# ------------------------------------------------------------------------------- the spec


class StudySpec(_Spec):
    """A validated study: objective, search space, search settings, cluster and tracking.

    Build it with :meth:`from_yaml` or :meth:`from_dict`; constructing it directly validates the
    same way (problems are shown for the file ``<study>``).

    Example:
        >>> spec = StudySpec.from_dict({
        ...     "name": "demo",
        ...     "objective": {"model": "cnn", "metric": "val_loss"},
        ...     "space": {"optimizer": {"type": "categorical", "choices": ["adam", "sgd"]}},
        ...     "search": {"sampler": {"name": "tpe", "n_startup_trials": 5}, "timeout": "30m"},
        ... })
        >>> spec.direction.value, spec.search.timeout, spec.to_dict()["search"]["sampler"]
        ('minimize', 1800.0, {'name': 'tpe', 'n_startup_trials': 5})
    """

    name: str = Field(description="Study name: letters, digits, '-', '_', '.'. Required.")
    objective: ObjectiveSpec = Field(description="What a trial trains and reports. Required.")
    space: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description=(
            "Searched hyperparameters by name. Default {} (allowed only for a user objective)."
        ),
    )
    search: SearchSpec = Field(
        default_factory=SearchSpec, description="Search settings. Defaults as in SearchSpec."
    )
    cluster: ClusterSpec = Field(
        default_factory=ClusterSpec, description="Cluster settings. Defaults: all auto/null."
    )
    tracking: TrackingSpec = Field(
        default_factory=TrackingSpec, description="MLflow settings. Defaults: all null."
    )
    storage: str | None = Field(
        default=None,
        description="Optuna storage URL. Default null: a journal file under the run folder.",
    )
    source: Path | None = Field(
        default=None,
        exclude=True,
        description="The file the spec was read from; not part of to_dict().",
    )

    @model_validator(mode="before")
    @classmethod
    def _validate_all(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, StudySpec):
            return data
        context = info.context or {}
        source = data.get("source") if isinstance(data, Mapping) else None
        source = Path(source) if source is not None else None
        label = context.get("label") or (str(source) if source is not None else _NO_FILE)
        if isinstance(data, Mapping):
            data = {k: v for k, v in data.items() if k != "source"}
        return _collect(data, label, source)

    # ---------------------------------------------------------------------------- loading

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], *, overrides: Mapping[str, Any] | None = None
    ) -> StudySpec:
        """Read and validate a study file.

        Args:
            path: The study file; messages show it as given.
            overrides: Dotted keys or short aliases (see OVERRIDE_ALIASES) to set; None values
                are skipped.

        Raises:
            SpecError: The file is missing, is not valid YAML, or has invalid content; every
                problem is one line.
        """
        label = os.fspath(path)
        file = Path(path)
        if not file.is_file():
            raise SpecError(f"{label}: {'not a file' if file.exists() else 'no such file'}")
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark is not None else label
            raise SpecError(f"{where}: invalid YAML: {exc.problem}") from None
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"{label}: cannot read the study file: {exc}") from None
        if data is None:
            raise SpecError(f"{label}: the study file is empty")
        return cls._build(data, source=file, label=label, overrides=overrides)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        source: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> StudySpec:
        """Validate study data in file form (as :meth:`to_dict` returns it).

        Args:
            data: The mapping.
            source: The file it came from, if any: shown in messages, and its folder is searched
                for a user objective. Without it messages show ``<study>``.
            overrides: As for :meth:`from_yaml`.

        Raises:
            SpecError: Every problem, one line each.
        """
        file = Path(source) if source is not None else None
        label = os.fspath(source) if source is not None else _NO_FILE
        return cls._build(data, source=file, label=label, overrides=overrides)

    @classmethod
    def _build(
        cls, data: Any, *, source: Path | None, label: str, overrides: Mapping[str, Any] | None
    ) -> StudySpec:
        problems = _Problems(label)
        if isinstance(data, Mapping):
            data = copy.deepcopy(dict(data))
            if overrides:
                _apply_overrides(data, overrides, problems)
        try:
            payload = {**data, "source": source} if isinstance(data, dict) else data
            spec = cls.model_validate(payload, context={"label": label})
        except SpecError as exc:
            raise SpecError(problems.lines + exc.problems) from None
        if problems.lines:
            raise SpecError(problems.lines)
        return spec

    def replace(self, **overrides: Any) -> StudySpec:
        """A re-validated copy with overrides applied (same keys as ``overrides=``).

        Dotted keys need dict unpacking: ``spec.replace(**{"search.n_trials": 3})``.

        Example:
            >>> spec = StudySpec.from_dict({"name": "a", "objective": {"model": "cnn"},
            ...     "space": {"x": {"type": "int", "low": 1, "high": 3}}})
            >>> spec.replace(n_trials=3, epochs=2).search.n_trials
            3
        """
        return type(self)._build(
            self.to_dict(),
            source=self.source,
            label=str(self.source) if self.source is not None else _NO_FILE,
            overrides=overrides,
        )

    # ---------------------------------------------------------------------------- output

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-able data in file form.

        Metric and direction are written resolved, so the dict (and :attr:`spec_hash`) records
        what the study really optimizes; samplers and pruners without options are written as
        their name.
        """
        data = self.model_dump(mode="json")
        data["objective"]["metric"] = self.metric
        data["objective"]["direction"] = self.direction.value
        for key in ("sampler", "pruner"):
            strategy = data["search"][key]
            data["search"][key] = (
                {"name": strategy["name"], **strategy["options"]}
                if strategy["options"]
                else strategy["name"]
            )
        return data

    def to_yaml(self) -> str:
        """The spec as a study file (the text of :meth:`to_dict`)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @property
    def spec_hash(self) -> str:
        """First 12 hex digits of the SHA-256 of the canonical JSON of :meth:`to_dict`."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def is_user_objective(self) -> bool:
        """Whether ``objective.model`` is a ``package.module:function`` reference."""
        return ":" in self.objective.model

    @property
    def metric(self) -> str:
        """The optimized metric: as given, else the model's default."""
        if self.objective.metric is not None:
            return self.objective.metric
        if self.is_user_objective:
            return USER_OBJECTIVE_METRIC
        return _catalog.default_metric(self.objective.model, self.objective.dataset)

    @property
    def direction(self) -> Direction:
        """The optimization direction: as given, else derived from the metric name."""
        return self.objective.direction or default_direction(self.metric)
