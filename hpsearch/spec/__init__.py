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

This package imports neither Optuna nor torch at import time; Optuna is imported only to check
sampler or pruner options against its constructors.
"""

from __future__ import annotations

from hpsearch._imports import load_user_objective
from hpsearch.spec._changes import Change, compare
from hpsearch.spec._cluster import (
    AdaptSpec,
    ClusterSpec,
    KubernetesSpec,
    MetricsSpec,
    SlurmSpec,
    TlsSpec,
)
from hpsearch.spec._devices import (
    DEVICE_FRACTIONS,
    DeviceId,
    device_count,
    is_mig,
    parse_device,
)
from hpsearch.spec._messages import parse_bytes, parse_duration
from hpsearch.spec._overrides import OVERRIDE_ALIASES
from hpsearch.spec._params import (
    CategoricalChoice,
    CategoricalParam,
    FloatParam,
    IntParam,
    ParamSpec,
)
from hpsearch.spec._search import (
    PRUNER_CLASSES,
    SAMPLER_CLASSES,
    PrunerSpec,
    SamplerSpec,
    SearchSpec,
)
from hpsearch.spec._sections import (
    BUILTIN_DATASETS,
    BUILTIN_MODELS,
    USER_OBJECTIVE_METRIC,
    Direction,
    ObjectiveSpec,
    ParallelSpec,
    Precision,
    Schedule,
    Strategy,
    TrackingSpec,
    default_direction,
)
from hpsearch.spec._share import PRIORITIES
from hpsearch.spec._simulated import SimulatedSpec, surrogate_instance
from hpsearch.spec._study import StudySpec
from hpsearch.spec._warm_start import WarmStartSpec

__all__ = [
    "BUILTIN_DATASETS",
    "BUILTIN_MODELS",
    "DEVICE_FRACTIONS",
    "OVERRIDE_ALIASES",
    "PRIORITIES",
    "PRUNER_CLASSES",
    "SAMPLER_CLASSES",
    "USER_OBJECTIVE_METRIC",
    "AdaptSpec",
    "CategoricalChoice",
    "CategoricalParam",
    "Change",
    "ClusterSpec",
    "DeviceId",
    "Direction",
    "FloatParam",
    "IntParam",
    "KubernetesSpec",
    "MetricsSpec",
    "ObjectiveSpec",
    "ParallelSpec",
    "ParamSpec",
    "Precision",
    "PrunerSpec",
    "SamplerSpec",
    "Schedule",
    "SearchSpec",
    "SimulatedSpec",
    "SlurmSpec",
    "Strategy",
    "StudySpec",
    "TlsSpec",
    "TrackingSpec",
    "WarmStartSpec",
    "compare",
    "default_direction",
    "device_count",
    "is_mig",
    "load_user_objective",
    "parse_bytes",
    "parse_device",
    "parse_duration",
    "surrogate_instance",
]
