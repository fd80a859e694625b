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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpsearch.data.surrogates._curve import Benchmark, Curve
from hpsearch.data.surrogates._lcbench import LCBench
from hpsearch.data.surrogates._synthetic import Synthetic

__all__ = ["BENCHMARKS", "Benchmark", "Curve", "benchmark", "benchmark_of"]

#: The benchmark names :func:`benchmark` knows (and ``replay``, a study that ran: see
#: :func:`benchmark_of`).
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


def benchmark_of(model: str, dataset: Any, source: Path | None = None) -> Benchmark:
    """The benchmark a study's ``objective.model`` and ``objective.dataset`` name: one of
    :data:`BENCHMARKS`, or ``replay`` with ``dataset: {name: replay, study: RUN_DIR/NAME}``
    (a path relative to the study file's folder, else to the working directory).

    Raises:
        ValueError: With one line saying what is wrong (a missing or unreadable study).
    """
    if model != "replay":
        return benchmark(model)
    from hpsearch.data.surrogates._replay import Replay
    from hpsearch.exceptions import HpsearchError

    folder = dataset.get("study") if isinstance(dataset, Mapping) else None
    if not isinstance(folder, str):
        raise ValueError("replay needs {name: replay, study: RUN_DIR/NAME}: a study that ran")
    path = Path(folder).expanduser()
    if not path.is_absolute() and source is not None and (source.parent / path).exists():
        path = source.parent / path
    try:
        return Replay(path)
    except (HpsearchError, OSError, KeyError, ValueError) as exc:
        raise ValueError(f"cannot replay {folder}: {str(exc).splitlines()[0]}") from None
