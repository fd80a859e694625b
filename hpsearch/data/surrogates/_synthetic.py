"""A synthetic benchmark with a known optimum: closed-form curves, no dependencies.

Three parameters: ``x`` (float in [0, 1]), ``lr`` (float in [1e-4, 1e-1], log) and ``width``
(int in [16, 256], log). With ``u = (log10(lr) + 4) / 3`` and ``w = log(width / 16) /
log(16)`` (both in [0, 1]) and the instance's optimum ``(x0, u0)``, the final accuracy is

    final = 0.2 + 0.7 * (1 - ((x - x0)**2 + (u - u0)**2) / d) + 0.1 * w

(``d``: the largest squared distance from the optimum in the unit square, so ``final`` lies in
[0.2, 1]), and the accuracy at epoch ``e`` of ``E`` is

    final * (1 - exp(-k * e / E)) / (1 - exp(-k)),   k = (1 + 9 * u) * (1 - 0.6 * w)

which rises to ``final`` at epoch ``E`` exactly. A larger learning rate rises faster and a
wider network slower, so curves cross: a high ``lr`` leads early and loses at the end, and the
widest network, which ends best, is behind for most of its run. An epoch takes
``0.5 + 4 * w`` seconds: the best configuration is also the slowest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hpsearch.data.surrogates._curve import Curve

__all__ = ["Synthetic"]

#: Each instance's optimum ``(x0, u0)``.
_OPTIMA = {"a": (0.3, 0.7), "b": (0.7, 0.4)}
_SPACE: dict[str, dict[str, Any]] = {
    "x": {"type": "float", "low": 0.0, "high": 1.0, "log": False},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "width": {"type": "int", "low": 16, "high": 256, "log": True},
}


class Synthetic:
    """The synthetic benchmark of this module: maximize ``val_accuracy``; instances ``a``, ``b``.

    :attr:`Curve.metrics` has ``val_accuracy`` and ``val_loss`` (``1 - val_accuracy``).

    Args:
        max_epochs: The length of a full curve (the final value is reached at this epoch).

    Example:
        >>> bench = Synthetic()
        >>> best = {"x": 0.3, "lr": 10 ** (-4 + 3 * 0.7), "width": 256}
        >>> round(bench.curve(best, "a", epochs=52).values[-1], 9), bench.best("a")
        (1.0, 1.0)
        >>> fast = {"x": 0.3, "lr": 0.1, "width": 16}
        >>> slow = {"x": 0.3, "lr": 10 ** (-4 + 3 * 0.7), "width": 256}
        >>> [bench.curve(fast, "a", 52).values[e] > bench.curve(slow, "a", 52).values[e]
        ...  for e in (4, 51)]
        [True, False]
    """

    name = "synthetic"
    metric = "val_accuracy"
    metrics: tuple[str, ...] = ("val_accuracy", "val_loss")
    direction = "maximize"

    def __init__(self, max_epochs: int = 52) -> None:
        if max_epochs < 1:
            raise ValueError(f"synthetic max_epochs must be >= 1, got {max_epochs}")
        self.max_epochs = max_epochs
        self.instances: tuple[str, ...] = tuple(_OPTIMA)

    def space(self) -> dict[str, dict[str, Any]]:
        """``x``, ``lr`` (log) and ``width`` (int, log)."""
        return {name: dict(param) for name, param in _SPACE.items()}

    def curve(self, params: Mapping[str, Any], instance: str, epochs: int) -> Curve:
        """The curve of ``params`` on ``instance``, epochs ``1..epochs``.

        Raises:
            ValueError: For an unknown instance, ``epochs`` outside ``1..max_epochs``, or
                params that miss a parameter, name an unknown one or lie outside the space.
        """
        if instance not in _OPTIMA:
            raise ValueError(
                f"synthetic has no instance {instance!r}: one of {', '.join(self.instances)}"
            )
        if not 1 <= epochs <= self.max_epochs:
            raise ValueError(f"synthetic epochs must be in 1..{self.max_epochs}, got {epochs}")
        x, u, w = self._unit(params)
        final = self._final(x, u, w, instance)
        k = (1 + 9 * u) * (1 - 0.6 * w)
        scale = final / -math.expm1(-k)
        values = tuple(scale * -math.expm1(-k * e / self.max_epochs) for e in range(1, epochs + 1))
        values = (*values[:-1], final) if epochs == self.max_epochs else values
        return Curve(
            values=values,
            epoch_s=(0.5 + 4 * w,) * epochs,
            metrics={"val_accuracy": values, "val_loss": tuple(1 - v for v in values)},
        )

    def best(self, instance: str, metric: str | None = None) -> float:
        """The exact best final value of ``metric`` (default :attr:`metric`) on ``instance``:
        ``val_accuracy`` 1.0 and ``val_loss`` 0.0, at ``(x0, u0)`` and width 256."""
        if instance not in _OPTIMA:
            raise ValueError(
                f"synthetic has no instance {instance!r}: one of {', '.join(self.instances)}"
            )
        bests = {"val_accuracy": 1.0, "val_loss": 0.0}
        if (metric or self.metric) not in bests:
            raise ValueError(f"synthetic has no metric {metric!r}: one of {', '.join(bests)}")
        return bests[metric or self.metric]

    def optimum(self, instance: str) -> dict[str, float | int]:
        """The configuration whose final value is :meth:`best` (up to rounding of ``lr``)."""
        x0, u0 = _OPTIMA[instance]
        return {"x": x0, "lr": 10 ** (-4 + 3 * u0), "width": 256}

    @staticmethod
    def _final(x: float, u: float, w: float, instance: str) -> float:
        x0, u0 = _OPTIMA[instance]
        d = max(x0, 1 - x0) ** 2 + max(u0, 1 - u0) ** 2
        return 0.2 + 0.7 * (1 - ((x - x0) ** 2 + (u - u0) ** 2) / d) + 0.1 * w

    @staticmethod
    def _unit(params: Mapping[str, Any]) -> tuple[float, float, float]:
        unknown = [name for name in params if name not in _SPACE]
        missing = [name for name in _SPACE if name not in params]
        if unknown or missing:
            raise ValueError(
                f"synthetic params: unknown {unknown}, missing {missing}; "
                f"its parameters are {', '.join(_SPACE)}"
            )
        for name, p in _SPACE.items():
            value = float(params[name])
            if not (p["low"] * (1 - 1e-9) <= value <= p["high"] * (1 + 1e-9)):
                raise ValueError(
                    f"synthetic params: {name} = {value:g} is outside [{p['low']}, {p['high']}]"
                )
        x = float(params["x"])
        u = min(max((math.log10(float(params["lr"])) + 4) / 3, 0.0), 1.0)
        w = min(max(math.log(float(params["width"]) / 16) / math.log(16), 0.0), 1.0)
        return x, u, w
