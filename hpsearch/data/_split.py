"""Data splits: the train/validation split every data set becomes, and how it is cut.

A leaf of :mod:`hpsearch.data`: the loaders (built-in, files, text) all build on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import SpecError

if TYPE_CHECKING:
    import torch


@dataclass
class DataSplit:
    """A train/validation split of one data set.

    ``info`` says what it holds: ``task`` (classification | language_model), ``kind``
    (image | sequence | tokens | vector), ``input_shape`` (one sample's shape),
    ``n_classes`` (classification), ``vocab_size`` and ``vocab`` (tokens), ``source``.
    A language-model split holds token blocks in ``x_*`` and no ``y_*``: the targets are
    the inputs shifted by one.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor | None
    x_val: torch.Tensor
    y_val: torch.Tensor | None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.x_val.shape[0])

    @property
    def task(self) -> str:
        return str(self.info.get("task", "classification"))


def split_indices(n: int, *, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and validation indices of ``n`` samples: a permutation fixed by ``seed``."""
    import torch

    if not 0.0 < val_fraction < 1.0:
        raise SpecError(
            [f"objective.dataset.val_fraction: must be between 0 and 1, got {val_fraction}"]
        )
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=g)
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    return order[n_val:], order[:n_val]


def classification_split(
    name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    options: Mapping[str, Any],
    seed: int,
    info: Mapping[str, Any],
    x_val: torch.Tensor | None = None,
    y_val: torch.Tensor | None = None,
) -> DataSplit:
    """Split (x, y) by ``seed`` unless validation arrays are given; fill in shape and classes."""
    limit = options.get("limit")
    if x_val is None:
        train, val = split_indices(
            x.shape[0], val_fraction=float(options.get("val_fraction", 0.2)), seed=seed
        )
        x, y, x_val, y_val = x[train], y[train], x[val], y[val]
    assert y_val is not None
    if limit is not None:  # a smaller training set, e.g. for quick tests
        x, y = x[: int(limit)], y[: int(limit)]
    n_classes = int(max(int(y.max()), int(y_val.max())) + 1)
    return DataSplit(
        name,
        x,
        y,
        x_val,
        y_val,
        info={
            "task": "classification",
            "input_shape": tuple(x.shape[1:]),
            "n_classes": n_classes,
            **info,
        },
    )
