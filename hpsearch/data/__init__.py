"""Data sets that need no download, the user's own files, split by the study's seed; and the
surrogate benchmarks the simulated cluster trains on (:mod:`hpsearch.data.surrogates`).

The catalogue (which data sets are built in, their options and the metrics each model reports
on them) is what the spec checks a study file against.
"""

from hpsearch.data._base import load_dataset
from hpsearch.data._catalog import (
    BUILTIN,
    check_for_model,
    default_metric,
    describe,
    describe_dataset,
    metrics_of,
    option_keys,
)
from hpsearch.data._split import DataSplit

__all__ = [
    "BUILTIN",
    "DataSplit",
    "check_for_model",
    "default_metric",
    "describe",
    "describe_dataset",
    "load_dataset",
    "metrics_of",
    "option_keys",
]
