"""A simulated cluster: hpsearch's own coordinator, samplers, pruners and schedulers, on a
clock that jumps from event to event, with trials whose epochs are a benchmark's recorded
learning curves (``objective.model: lcbench | synthetic``, ``cluster.backend: simulated``).

Only the executor and the clock are simulated (:mod:`._cluster`, :mod:`._trial`): the same
:class:`~hpsearch.coordinator.Coordinator` asks, places, pauses, promotes and tells, and the
study it leaves is an ordinary Optuna study. A run also leaves a timeline (every start of a
trial: worker, virtual start and end, epochs, decision) and its figures (simulated wall
time, device-hours, worker losses) in the study's run folder.

A benchmark (:func:`benchmark`) has a search space and, for each configuration and instance,
a :class:`Curve`: the objective metric at each epoch, the seconds each epoch takes and every
other metric it has: ``lcbench`` (YAHPO Gym's LCBench surrogate; needs
``pip install 'hpsearch[sim]'``) or ``synthetic`` (closed-form curves with a known optimum).

Example:
    >>> from hpsearch.simulation import benchmark
    >>> bench = benchmark("synthetic")
    >>> curve = bench.curve({"x": 0.5, "lr": 0.01, "width": 64}, "a", epochs=3)
    >>> len(curve.values), curve.epoch_s
    (3, (2.5, 2.5, 2.5))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes
from hpsearch.data.surrogates import BENCHMARKS, Benchmark, Curve, LCBench, Synthetic, benchmark
from hpsearch.simulation._run import SUMMARY, TIMELINE, Simulation, save, simulate

if TYPE_CHECKING:
    from hpsearch.simulation._grid import method_overrides, plot, run_grid
    from hpsearch.simulation._tracking import record
    from hpsearch.spec import StudySpec

__all__ = [
    "BENCHMARKS",
    "SUMMARY",
    "TIMELINE",
    "Benchmark",
    "Curve",
    "LCBench",
    "Simulation",
    "Synthetic",
    "benchmark",
    "describe",
    "method_overrides",
    "plot",
    "record",
    "run_grid",
    "save",
    "simulate",
]


def describe(spec: StudySpec) -> str:
    """The simulated cluster and benchmark in one line."""
    from hpsearch.spec import SimulatedSpec

    sim = spec.cluster.simulated or SimulatedSpec()
    dataset = spec.objective.dataset
    instance = dataset.get("instance") if isinstance(dataset, dict) else None
    parts = [
        f"{sim.workers} workers x {sim.gpus_per_worker} device(s)",
        f"{spec.objective.model}" + (f" instance {instance}" if instance else ""),
    ]
    if sim.worker_mtbf:
        parts.append(f"a worker lost every {sim.worker_mtbf / 3600:.3g} h on average")
    return ", ".join(parts)


__getattr__ = lazy_attributes(
    __name__,
    {
        "._tracking": ("record",),
        "._grid": (
            "method_overrides",
            "plot",
            "run_grid",
        ),
    },
)
