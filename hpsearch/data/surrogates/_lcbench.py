"""LCBench: YAHPO Gym's surrogate of 2,000 configurations of Auto-PyTorch MLPs on 34 tasks.

The surrogate (``lcbench/model.onnx``, see ``lcbench/SOURCE.md``) is a network that
maps an OpenML task, a configuration and an epoch to six outputs: ``time`` (cumulative
training seconds at that epoch), ``val_accuracy`` (percent), ``val_cross_entropy``,
``val_balanced_accuracy``, ``test_cross_entropy`` and ``test_balanced_accuracy``.

It is evaluated here with onnxruntime directly, one batch of all the asked epochs a curve,
with the inputs yahpo-gym's ``BenchmarkSet.objective_function`` builds (``x_cat``: the task's
code from ``encoding.json``, int32; ``x_cont``: epoch, batch_size, learning_rate, momentum,
weight_decay, num_layers, max_units, max_dropout as given, float32; the network applies its
own log transforms), so its values are yahpo-gym's, without ConfigSpace's per-call checks.
The cost is the network's: about 1 MFLOP an epoch.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hpsearch.data.surrogates._curve import Curve
from hpsearch.exceptions import MissingExtra

__all__ = ["OUTPUTS", "LCBench"]

DATA = Path(__file__).with_name("lcbench")

#: The surrogate's outputs, in the order of its output columns.
OUTPUTS = (
    "time",
    "val_accuracy",
    "val_cross_entropy",
    "val_balanced_accuracy",
    "test_cross_entropy",
    "test_balanced_accuracy",
)
#: The metrics a study may optimize, and their direction (``time`` is the cost, not one).
DIRECTIONS = {
    "val_accuracy": "maximize",
    "val_cross_entropy": "minimize",
    "val_balanced_accuracy": "maximize",
    "test_cross_entropy": "minimize",
    "test_balanced_accuracy": "maximize",
}
#: The configuration's parameters in the order of the surrogate's ``x_cont`` (after the epoch).
PARAMS = (
    "batch_size",
    "learning_rate",
    "momentum",
    "weight_decay",
    "num_layers",
    "max_units",
    "max_dropout",
)
_INSTANCE = "OpenML_task_id"
_FIDELITY = "epoch"
#: The shortest epoch a curve has: the surrogate's cumulative time may stand still or dip.
MIN_EPOCH_S = 0.01
_CACHE_SIZE = 4096


def _require_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingExtra("the lcbench benchmark", package="onnxruntime", extra="sim") from exc
    return onnxruntime


_session_lock = threading.Lock()
_session: tuple[int, Any] | None = None  # (the process that made it, the session)


def _onnx_session() -> Any:
    """The process's one inference session, made on first use (one thread: the simulator
    runs many processes or none)."""
    global _session
    held = _session
    if held is not None and held[0] == os.getpid():
        return held[1]
    with _session_lock:
        if _session is None or _session[0] != os.getpid():
            ort = _require_onnxruntime()
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(
                str(DATA / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
            )
            _session = (os.getpid(), session)
        return _session[1]


@functools.cache
def _files() -> tuple[dict[str, Any], dict[str, int]]:
    """``config_space.json`` by parameter name, and the task codes of ``encoding.json``."""
    raw = json.loads((DATA / "config_space.json").read_text())
    by_name = {hp["name"]: hp for hp in raw["hyperparameters"]}
    codes = json.loads((DATA / "encoding.json").read_text())[_INSTANCE]
    return by_name, codes


@functools.cache
def _reference() -> dict[str, Any]:
    return json.loads((DATA / "reference_best.json").read_text())  # type: ignore[no-any-return]


def _predict(session: Any, code: int, x_params: np.ndarray, epochs: np.ndarray) -> np.ndarray:
    """The surrogate's outputs (float32, one row each) for rows of parameters and epochs."""
    x_cont = np.empty((len(epochs), 1 + len(PARAMS)), dtype=np.float64)
    x_cont[:, 0] = epochs
    x_cont[:, 1:] = x_params
    x_cat = np.full((len(epochs), 1), code, dtype=np.int32)
    out = session.run(None, {"x_cat": x_cat, "x_cont": x_cont.astype(np.float32)})[0]
    return out  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _evaluate(
    params: tuple[float, ...], instance: str, epochs: int
) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    """``(epoch_s, outputs)`` of one curve; ``outputs`` in the order of :data:`OUTPUTS`."""
    code = _files()[1][instance]
    out = _predict(_onnx_session(), code, np.asarray(params), np.arange(1, epochs + 1))
    cumulative = np.maximum.accumulate(out[:, 0].astype(np.float64))
    epoch_s = cumulative.copy()
    epoch_s[1:] -= cumulative[:-1]
    np.maximum(epoch_s, MIN_EPOCH_S, out=epoch_s)
    return tuple(epoch_s.tolist()), tuple(tuple(column) for column in out.T.tolist())


class LCBench:
    """YAHPO Gym's LCBench surrogate: 7 parameters, 34 OpenML tasks, 52 epochs.

    ``epoch_s`` is the difference of the surrogate's cumulative ``time`` (after its running
    maximum; at least :data:`MIN_EPOCH_S`); :attr:`Curve.metrics` has all six outputs as the
    surrogate gives them, ``time`` cumulative. Curves are cached (the last 4096 asked).

    Args:
        metric: The objective, one of :data:`DIRECTIONS`; ``val_accuracy`` (percent) by default.

    Raises:
        MissingExtra: When onnxruntime is not installed (``pip install 'hpsearch[sim]'``).
        ValueError: For an unknown metric.

    Example:
        >>> bench = LCBench()
        >>> curve = bench.curve(bench.default(), "3945", epochs=52)
        >>> len(curve), sorted(curve.metrics) == sorted(OUTPUTS)
        (52, True)
        >>> 0 < curve.values[-1] <= bench.best("3945") <= 100
        True
    """

    name = "lcbench"

    def __init__(self, metric: str = "val_accuracy") -> None:
        if metric not in DIRECTIONS:
            raise ValueError(f"lcbench has no metric {metric!r}: one of {', '.join(DIRECTIONS)}")
        try:
            found = importlib.util.find_spec("onnxruntime") is not None
        except ValueError:  # in sys.modules without a spec: importable
            found = True
        if not found:
            raise MissingExtra("the lcbench benchmark", package="onnxruntime", extra="sim")
        by_name, _ = _files()
        self.metric = metric
        self.metrics: tuple[str, ...] = tuple(DIRECTIONS)
        self.direction = DIRECTIONS[metric]
        self.max_epochs: int = by_name[_FIDELITY]["upper"]
        self.instances: tuple[str, ...] = tuple(by_name[_INSTANCE]["choices"])
        self._space = {
            name: {
                "type": "int" if hp["type"] == "uniform_int" else "float",
                "low": hp["lower"],
                "high": hp["upper"],
                "log": hp["log"],
            }
            for name, hp in by_name.items()
            if name not in (_INSTANCE, _FIDELITY)
        }

    def space(self) -> dict[str, dict[str, Any]]:
        """The 7 parameters with config_space.json's bounds (``int`` or ``float``, log or not)."""
        return {name: dict(param) for name, param in self._space.items()}

    def default(self) -> dict[str, int | float]:
        """config_space.json's default configuration."""
        by_name, _ = _files()
        return {name: by_name[name]["default"] for name in self._space}

    def curve(self, params: Mapping[str, Any], instance: str, epochs: int) -> Curve:
        """The surrogate's curve of ``params`` on task ``instance``, epochs ``1..epochs``.

        Raises:
            ValueError: For an unknown instance, ``epochs`` outside ``1..52``, or params that
                miss a parameter, name an unknown one or lie outside the space.
        """
        if instance not in self.instances:
            raise ValueError(
                f"lcbench has no instance {instance!r}: one of {', '.join(self.instances)}"
            )
        if not 1 <= epochs <= self.max_epochs:
            raise ValueError(f"lcbench epochs must be in 1..{self.max_epochs}, got {epochs}")
        epoch_s, outputs = _evaluate(self._key(params), instance, epochs)
        metrics = dict(zip(OUTPUTS, outputs, strict=True))
        return Curve(values=metrics[self.metric], epoch_s=epoch_s, metrics=metrics)

    def best(self, instance: str, metric: str | None = None) -> float:
        """The best value of ``metric`` (default :attr:`metric`, else one of
        :data:`DIRECTIONS`) at epoch 52 on ``instance`` that :func:`_reference_best` found
        (over 50,000 random configurations and the default; see ``lcbench/SOURCE.md``).
        """
        metric = metric or self.metric
        if metric not in DIRECTIONS:
            raise ValueError(f"lcbench has no metric {metric!r}: one of {', '.join(DIRECTIONS)}")
        if instance not in self.instances:
            raise ValueError(
                f"lcbench has no instance {instance!r}: one of {', '.join(self.instances)}"
            )
        return float(_reference()["best"][metric][instance])

    def _key(self, params: Mapping[str, Any]) -> tuple[float, ...]:
        unknown = [name for name in params if name not in self._space]
        missing = [name for name in PARAMS if name not in params]
        if unknown or missing:
            raise ValueError(
                f"lcbench params: unknown {unknown}, missing {missing}; "
                f"its parameters are {', '.join(self._space)}"
            )
        key = tuple(float(params[name]) for name in PARAMS)
        for name, value in zip(PARAMS, key, strict=True):
            low, high = self._space[name]["low"], self._space[name]["high"]
            if not low * (1 - 1e-9) <= value <= high * (1 + 1e-9):
                raise ValueError(f"lcbench params: {name} = {value:g} is outside [{low}, {high}]")
        return key


def _random_configs(n: int, seed: int) -> np.ndarray:
    """``n`` random configurations (rows, in the order of :data:`PARAMS`): uniform, or
    log-uniform where the space is on a log scale; integers rounded."""
    space = LCBench().space()
    rng = np.random.default_rng(seed)
    columns = []
    for name in PARAMS:
        p = space[name]
        if p["log"]:
            column = np.exp(rng.uniform(math.log(p["low"]), math.log(p["high"]), n))
        else:
            column = rng.uniform(p["low"], p["high"], n)
        if p["type"] == "int":
            column = np.clip(np.rint(column), p["low"], p["high"])
        columns.append(column)
    return np.stack(columns, axis=1)


def _reference_best(instance: str, n: int = 50_000, seed: int = 0) -> dict[str, float]:
    """The best value of each metric of :data:`DIRECTIONS` on ``instance`` at epoch 52, over
    ``n`` configurations of :func:`_random_configs` and the default configuration.

    This is how ``lcbench/reference_best.json`` was made (``n=50_000, seed=0``; see
    ``benchmarks/lcbench.py``).
    """
    bench = LCBench()
    default = bench.default()
    configs = np.vstack([_random_configs(n, seed), [[default[p] for p in PARAMS]]])
    code = _files()[1][instance]
    session = _onnx_session()
    out = np.vstack(
        [
            _predict(session, code, rows, np.full(len(rows), bench.max_epochs))
            for rows in np.array_split(configs, math.ceil(len(configs) / 5000))
        ]
    )
    return {
        metric: float(
            np.max(out[:, OUTPUTS.index(metric)])
            if direction == "maximize"
            else np.min(out[:, OUTPUTS.index(metric)])
        )
        for metric, direction in DIRECTIONS.items()
    }
