"""Data sets that need no download, the user's own files, split by the study's seed."""

from hpsearch.data._base import load_dataset
from hpsearch.data._catalog import BUILTIN, describe, describe_dataset
from hpsearch.data._split import DataSplit

__all__ = ["BUILTIN", "DataSplit", "describe", "describe_dataset", "load_dataset"]
