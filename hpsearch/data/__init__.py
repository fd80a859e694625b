"""Built-in data sets that need no download, split by the study's seed."""

from hpsearch.data._base import DataSplit, load_dataset

__all__ = ["DataSplit", "load_dataset"]
