"""What a benchmark is: a search space, and for each configuration a recorded learning curve.

A simulated trial does not train: its epoch ``e`` costs ``curve.epoch_s[e - 1]`` seconds of
virtual time and reports ``curve.metrics[name][e - 1]`` for every metric.

This module imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Benchmark", "Curve"]


@dataclass(frozen=True)
class Curve:
    """One configuration's learning curve on one instance, epoch 1 first.

    Attributes:
        values: The benchmark's objective metric at epochs ``1..n``.
        epoch_s: Seconds each epoch takes (not cumulative), each ``> 0``.
        metrics: Every metric the benchmark has, name to its value at epochs ``1..n``; the
            objective metric is one of them.

    Example:
        >>> curve = Curve(values=(0.5, 0.7), epoch_s=(2.0, 2.0), metrics={"acc": (0.5, 0.7)})
        >>> len(curve), curve.total_s
        (2, 4.0)
    """

    values: tuple[float, ...]
    epoch_s: tuple[float, ...]
    metrics: dict[str, tuple[float, ...]]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def total_s(self) -> float:
        """Seconds all the curve's epochs take together."""
        return sum(self.epoch_s)


class Benchmark(Protocol):
    """A benchmark the simulated cluster runs trials of.

    Attributes:
        name: Its name for :func:`~hpsearch.simulation.benchmark`.
        metric: The objective metric, one of the keys of :attr:`Curve.metrics`.
        direction: ``"maximize"`` or ``"minimize"``: what is better for :attr:`metric`.
        max_epochs: The longest curve it has.
        instances: The problems it has (data sets, tasks); each curve is on one of them.
        metrics: The metrics a study may optimize (:attr:`metric` first or among them).
    """

    name: str
    metric: str
    metrics: tuple[str, ...]
    direction: str
    max_epochs: int
    instances: tuple[str, ...]

    def space(self) -> dict[str, dict[str, Any]]:
        """The search space, in a study file's ``space`` format (see
        :mod:`hpsearch.search._space`)."""
        ...

    def curve(self, params: Mapping[str, Any], instance: str, epochs: int) -> Curve:
        """The curve of configuration ``params`` on ``instance``, epochs ``1..epochs``."""
        ...

    def best(self, instance: str, metric: str | None = None) -> float:
        """The best value of ``metric`` (default :attr:`metric`) at :attr:`max_epochs` on
        ``instance`` (for regret)."""
        ...
