"""Data sets as in-memory tensors: small enough to load once per worker process and reuse."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from hpsearch.exceptions import SpecError

if TYPE_CHECKING:
    import torch


@dataclass
class DataSplit:
    """A train/validation split of one data set."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.x_val.shape[0])


def _split(x: torch.Tensor, y: torch.Tensor, *, val_fraction: float, seed: int) -> tuple[torch.Tensor, ...]:
    import torch

    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(x.shape[0], generator=g)
    n_val = max(1, int(round(x.shape[0] * val_fraction)))
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


def _digits(options: Mapping[str, Any], seed: int) -> DataSplit:
    """scikit-learn's digits: 1,797 grey 8x8 images of 10 classes, scaled to [0, 1].

    Options: ``size`` (resize to size x size, bilinear), ``val_fraction`` (default 0.2).
    """
    import torch
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    size = int(options.get("size", 8))
    if size != 8:
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    x_tr, y_tr, x_va, y_va = _split(x, y, val_fraction=float(options.get("val_fraction", 0.2)), seed=seed)
    return DataSplit(
        "digits", x_tr, y_tr, x_va, y_va,
        info={"input_shape": tuple(x.shape[1:]), "n_classes": 10, "task": "classification"},
    )


_LOADERS = {"digits": _digits}


def _normalise(dataset: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(dataset, str):
        return dataset, {}
    options = dict(dataset)
    name = options.pop("name", None)
    if name is None:
        raise SpecError([f"<study>: objective.dataset: a mapping needs 'name', got {dict(dataset)!r}"])
    return str(name), options


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, options_json: str, seed: int) -> DataSplit:
    loader = _LOADERS.get(name)
    if loader is None:
        raise SpecError([f"<study>: objective.dataset: unknown data set {name!r} (built-in: {', '.join(_LOADERS)})"])
    return loader(json.loads(options_json), seed)


def load_dataset(dataset: str | Mapping[str, Any], *, seed: int | None) -> DataSplit:
    """Load a built-in data set, split by ``seed`` (cached: one load per process)."""
    name, options = _normalise(dataset)
    return _load_cached(name, json.dumps(options, sort_keys=True), int(seed or 0))
