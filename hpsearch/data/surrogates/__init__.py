"""Surrogate benchmarks: recorded or modelled learning curves that the simulated cluster
trains on instead of a model (LCBench's YAHPO Gym surrogate, synthetic crossing curves, a
replay of a study that ran). They are data to the simulated cluster, as the digits are to a
CNN, so they sit with the data sets: the spec checks a surrogate study against them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.data.surrogates._benchmarks import BENCHMARKS, benchmark, benchmark_of
    from hpsearch.data.surrogates._curve import Benchmark, Curve
    from hpsearch.data.surrogates._lcbench import LCBench
    from hpsearch.data.surrogates._synthetic import Synthetic

__all__ = ["BENCHMARKS", "Benchmark", "Curve", "LCBench", "Synthetic", "benchmark", "benchmark_of"]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._benchmarks": (
            "BENCHMARKS",
            "benchmark",
            "benchmark_of",
        ),
        "._curve": (
            "Benchmark",
            "Curve",
        ),
        "._lcbench": ("LCBench",),
        "._synthetic": ("Synthetic",),
    },
)
