"""The benchmarks by name: :func:`benchmark` ``("lcbench" | "synthetic")``.

Example:
    >>> bench = benchmark("synthetic")
    >>> bench.direction, bench.instances, sorted(bench.space())
    ('maximize', ('a', 'b'), ['lr', 'width', 'x'])
    >>> benchmark("nas")
    Traceback (most recent call last):
    ...
    ValueError: unknown benchmark 'nas': one of lcbench, synthetic
"""

from __future__ import annotations

from hpsearch.simulation._curve import Benchmark, Curve
from hpsearch.simulation._lcbench import LCBench
from hpsearch.simulation._synthetic import Synthetic

__all__ = ["BENCHMARKS", "Benchmark", "Curve", "benchmark"]

#: The benchmark names :func:`benchmark` knows.
BENCHMARKS = ("lcbench", "synthetic")


def benchmark(name: str) -> Benchmark:
    """The benchmark called ``name``, with its default objective metric.

    Args:
        name: ``"lcbench"`` (YAHPO Gym's LCBench surrogate, ``val_accuracy``; needs
            onnxruntime) or ``"synthetic"`` (closed-form curves with a known optimum).

    Raises:
        ValueError: For another name, with one line naming the known ones.
        MissingExtra: For ``lcbench`` without onnxruntime.
    """
    if name == "lcbench":
        return LCBench()
    if name == "synthetic":
        return Synthetic()
    raise ValueError(f"unknown benchmark {name!r}: one of {', '.join(BENCHMARKS)}")
