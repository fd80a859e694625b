"""hpsearch: distributed hyperparameter search for deep learning.

An Optuna study coordinator hands trials to a Dask cluster; each worker owns a GPU set
(or CPU slots), trains with mixed precision, and every trial lands in MLflow.

    >>> import hpsearch
    >>> hpsearch.__version__
    '0.1.0'

``import hpsearch`` stays cheap: torch, distributed and mlflow are imported only where used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ClusterError",
    "GpuAllocationError",
    "HpsearchError",
    "SpecError",
    "Study",
    "StudySpec",
    "TrackingError",
    "TrialContext",
    "__version__",
]

_LAZY = {
    "Study": "hpsearch.study",
    "StudySpec": "hpsearch.spec",
    "TrialContext": "hpsearch.trial",
    "HpsearchError": "hpsearch.exceptions",
    "SpecError": "hpsearch.exceptions",
    "ClusterError": "hpsearch.exceptions",
    "GpuAllocationError": "hpsearch.exceptions",
    "TrackingError": "hpsearch.exceptions",
}

if TYPE_CHECKING:
    from hpsearch.exceptions import (
        ClusterError,
        GpuAllocationError,
        HpsearchError,
        SpecError,
        TrackingError,
    )
    from hpsearch.spec import StudySpec
    from hpsearch.study import Study
    from hpsearch.trial import TrialContext


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
