"""The user's own data: an ``.npz`` of arrays, a text corpus, or a function returning data sets."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.data import _catalog

if TYPE_CHECKING:
    from hpsearch.data._split import DataSplit


def load_npz(path: Path, *, options: Mapping[str, Any], seed: int) -> DataSplit:
    """Arrays ``x`` and ``y`` (class ids), optional ``x_val`` and ``y_val``.

    ``x`` holds samples first: ``(N, C, H, W)`` images, ``(N, T, F)`` sequences, ``(N, T)``
    integer tokens or ``(N, D)`` vectors. Without ``x_val``, a ``val_fraction`` (0.2) is split
    off by the study's seed.
    """
    import numpy as np

    from hpsearch.data._split import classification_split

    kind = _catalog.describe({"path": str(path)}).kind  # checks the file, as at study load
    with np.load(path, allow_pickle=False) as arrays:
        data = {k: arrays[k] for k in ("x", "y", "x_val", "y_val") if k in arrays.files}
    tensors = {
        k: _tensor(v, integer=(kind == "tokens" and k.startswith("x")) or k.startswith("y"))
        for k, v in data.items()
    }
    info: dict[str, Any] = {"kind": kind, "source": str(path)}
    if kind == "tokens":
        info["vocab_size"] = int(
            max(int(t.max()) for k, t in tensors.items() if k.startswith("x")) + 1
        )
    return classification_split(
        path.stem,
        tensors["x"],
        tensors["y"],
        options=options,
        seed=seed,
        info=info,
        x_val=tensors.get("x_val"),
        y_val=tensors.get("y_val"),
    )


def _tensor(array: Any, *, integer: bool) -> Any:
    import torch

    return torch.as_tensor(array, dtype=torch.long if integer else torch.float32)


def load_text(path: Path, *, options: Mapping[str, Any], seed: int) -> DataSplit:
    """A UTF-8 text file as a character-level language-model corpus."""
    from hpsearch.data._text import corpus_split

    _catalog.describe({"path": str(path)})
    return corpus_split(
        path.stem, path.read_text(encoding="utf-8"), options=options, seed=seed, source=str(path)
    )


def load_function(ref: str, *, seed: int, source: Path | None) -> DataSplit:
    """``package.module:function`` returning data: see :func:`materialise`.

    The function may take ``seed`` (the study's) as a keyword argument.
    """
    from hpsearch._imports import load_user_objective

    fn = load_user_objective(ref, [Path.cwd(), *([source.parent] if source is not None else [])])
    kwargs = {"seed": seed} if "seed" in inspect.signature(fn).parameters else {}
    return materialise(fn(**kwargs), name=ref, seed=seed)


def materialise(result: Any, *, name: str, seed: int) -> DataSplit:
    """In-memory tensors from what a data function returned.

    Accepted: a :class:`DataSplit`; a ``(train, val)`` pair of torch data sets of ``(x, y)``
    items; one such data set (split by the study's seed); or a mapping of arrays like an
    ``.npz`` (``x``, ``y``, optional ``x_val``, ``y_val``).
    """
    import torch

    from hpsearch.data._split import DataSplit

    if isinstance(result, DataSplit):
        return result
    if isinstance(result, Mapping):
        x = torch.as_tensor(result["x"])
        kind = _catalog.npz_kind(x.ndim, not x.is_floating_point())
        arrays = {
            k: torch.as_tensor(v) for k, v in result.items() if k in ("x", "y", "x_val", "y_val")
        }
        return _from_tensors(name, arrays, kind=kind, seed=seed)
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and all(hasattr(d, "__getitem__") for d in result)
    ):
        (x, y), (x_val, y_val) = _stack(result[0], name), _stack(result[1], name)
        arrays = {"x": x, "y": y, "x_val": x_val, "y_val": y_val}
    elif hasattr(result, "__getitem__") and hasattr(result, "__len__"):
        x, y = _stack(result, name)
        arrays = {"x": x, "y": y}
    else:
        raise TypeError(
            f"objective.dataset: {name} returned {type(result).__name__}; expected a torch "
            "Dataset of (x, y), a (train, val) pair of them, or a mapping of arrays x, y"
        )
    kind = _catalog.npz_kind(arrays["x"].ndim, not arrays["x"].is_floating_point())
    return _from_tensors(name, arrays, kind=kind, seed=seed)


def _from_tensors(name: str, arrays: dict[str, Any], *, kind: str, seed: int) -> DataSplit:
    from hpsearch.data._split import classification_split

    info: dict[str, Any] = {"kind": kind, "source": name}
    if kind == "tokens":
        info["vocab_size"] = int(
            max(int(arrays[k].max()) for k in ("x", "x_val") if k in arrays) + 1
        )
    return classification_split(
        name,
        arrays["x"] if kind == "tokens" else arrays["x"].float(),
        arrays["y"].long(),
        options={},
        seed=seed,
        info=info,
        x_val=None
        if "x_val" not in arrays
        else (arrays["x_val"] if kind == "tokens" else arrays["x_val"].float()),
        y_val=None if "y_val" not in arrays else arrays["y_val"].long(),
    )


def _stack(dataset: Any, name: str) -> tuple[Any, Any]:
    import torch

    xs, ys = [], []
    for i in range(len(dataset)):
        item = dataset[i]
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"objective.dataset: {name}: item {i} is not an (x, y) pair")
        xs.append(torch.as_tensor(item[0]))
        ys.append(torch.as_tensor(item[1]))
    return torch.stack(xs), torch.stack(ys).long()
