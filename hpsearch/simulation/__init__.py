"""Benchmarks for the simulated cluster: a trial replays a recorded learning curve.

A benchmark has a search space and, for each configuration and instance, a :class:`Curve`:
the objective metric at each epoch, the seconds each epoch takes and every other metric it
has. :func:`benchmark` gives one by name: ``lcbench`` (YAHPO Gym's LCBench surrogate; needs
``pip install 'hpsearch[sim]'``) or ``synthetic`` (closed-form curves with a known optimum).

Example:
    >>> from hpsearch.simulation import benchmark
    >>> bench = benchmark("synthetic")
    >>> curve = bench.curve({"x": 0.5, "lr": 0.01, "width": 64}, "a", epochs=3)
    >>> len(curve.values), curve.epoch_s
    (3, (2.5, 2.5, 2.5))
"""

from hpsearch.simulation._benchmarks import BENCHMARKS, Benchmark, Curve, benchmark
from hpsearch.simulation._lcbench import LCBench
from hpsearch.simulation._synthetic import Synthetic

__all__ = ["BENCHMARKS", "Benchmark", "Curve", "LCBench", "Synthetic", "benchmark"]
