"""What a data set is, known without loading it: used when a study file is checked.

A data set in a study file is one of

* a built-in name (``digits``, ``digits-seq``, ``python-docs``, ``docs-or-code``), or a mapping
  ``{name: NAME, <options>}``;
* the user's file, ``{path: data.npz}`` (arrays ``x``, ``y``, optional ``x_val``, ``y_val``) or
  ``{path: corpus.txt}`` (a language-model corpus), relative to the study file's folder;
* ``"package.module:function"``, a function returning torch data sets.

Each has a *task* (``classification`` or ``language_model``) and a *kind* of input
(``image`` ``(C, H, W)``, ``sequence`` ``(T, F)`` of real values, ``tokens`` ``(T,)`` of ids,
or ``vector`` ``(D,)``). Model families say which they take (see :data:`FAMILY_INPUTS`), so a
mismatch is a one-line error when the study is loaded, not a failed trial.

This module imports neither torch nor scikit-learn.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILTIN: dict[str, tuple[str, str, str]] = {
    # name: (task, kind, what it is)
    "digits": ("classification", "image", "scikit-learn's 8x8 digits, 10 classes"),
    "digits-seq": ("classification", "sequence", "the digits read row by row, 10 classes"),
    "python-docs": (
        "language_model",
        "tokens",
        "CPython's reference documentation (pydoc_data), characters",
    ),
    "docs-or-code": (
        "classification",
        "tokens",
        "64-character windows: Python's documentation or its source",
    ),
}

#: The tasks and input kinds each built-in family trains on.
FAMILY_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cnn": (("classification",), ("image", "sequence")),
    "rnn": (("classification",), ("image", "sequence", "tokens", "vector")),
    "lstm": (("classification", "language_model"), ("image", "sequence", "tokens", "vector")),
    "gan": (("classification", "generation"), ("image", "sequence", "vector")),
    "transformer": (("language_model",), ("tokens",)),
}

#: The per-epoch metrics of each (family, task); the objective's metric must be one of them.
#: What a built-in trial costs, reported every epoch so that a cost can be an objective:
#: parameter count, seconds spent training so far, training throughput, and inference time
#: per sample on the trial's device (milliseconds, batched evaluation).
COST_METRICS = ("params", "train_seconds", "samples_per_s", "latency_ms")
_TIMING = (*COST_METRICS, "epoch_s")
METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("val_accuracy", "val_loss", "train_loss", *_TIMING),
    "language_model": ("val_perplexity", "val_loss", "val_accuracy", "train_loss", *_TIMING),
    "gan": ("val_mmd", "g_loss", "d_loss", "d_real", "d_fake", *_TIMING),
}

DATA_OPTIONS: dict[str, tuple[str, ...]] = {
    "digits": ("size", "val_fraction", "limit"),
    "digits-seq": ("size", "val_fraction", "limit"),
    "python-docs": ("val_fraction", "max_chars", "block"),
    "docs-or-code": ("val_fraction", "length", "per_class"),
    "npz": ("val_fraction", "limit"),
    "txt": ("val_fraction", "max_chars", "block"),
}


@dataclass(frozen=True)
class DataInfo:
    """A data set as a study file names it: its task and input kind (``None``: known at load)."""

    label: str
    task: str | None
    kind: str | None


def describe_dataset(dataset: Any) -> str:
    """A short label: ``digits``, ``digits (size=16)``, ``data.npz``, ``pkg.mod:fn``."""
    if isinstance(dataset, Mapping):
        head = str(dataset.get("path") or dataset.get("name"))
        options = ", ".join(f"{k}={v}" for k, v in dataset.items() if k not in ("name", "path"))
        return f"{head} ({options})" if options else head
    return str(dataset)


def metrics_of(model: str, task: str | None) -> tuple[str, ...]:
    """The metrics a built-in family reports on a task (classification if not yet known)."""
    if model == "gan":
        return METRICS["gan"]
    return METRICS[task or "classification"]


def default_metric(model: str, dataset: Any) -> str:
    """The metric a built-in family optimizes by default on ``dataset``."""
    task = describe(dataset, check_files=False).task
    return metrics_of(model, task)[0]


def resolve_path(path: str | os.PathLike[str], source: Path | None) -> Path:
    """A user data file: as given if absolute, else next to the study file, else from the cwd."""
    p = Path(os.path.expanduser(os.fspath(path)))
    if p.is_absolute():
        return p
    if source is not None:
        near = Path(source).parent / p
        if near.exists():
            return near.resolve()
    return (Path.cwd() / p).resolve()


def describe(dataset: Any, *, source: Path | None = None, check_files: bool = True) -> DataInfo:
    """What ``dataset`` (as written in a study file) is.

    Raises:
        ValueError: with a message naming what is wrong (the caller adds file and field).
    """
    if isinstance(dataset, str):
        if ":" in dataset:
            return DataInfo(dataset, None, None)
        if dataset not in BUILTIN:
            raise ValueError(f"unknown dataset {dataset!r}")
        task, kind, _ = BUILTIN[dataset]
        return DataInfo(dataset, task, kind)
    if not isinstance(dataset, Mapping):
        raise ValueError(f"expected a data set name or a mapping, got {type(dataset).__name__}")
    if "path" in dataset:
        path = str(dataset["path"])
        suffix = Path(path).suffix.lower()
        if suffix == ".txt":
            if check_files:
                _check_text(resolve_path(path, source), path)
            return DataInfo(path, "language_model", "tokens")
        if suffix == ".npz":
            npz = _check_npz(resolve_path(path, source), path) if check_files else None
            return DataInfo(path, "classification", npz)
        raise ValueError(f"{path!r}: a data file must be .npz (arrays x, y) or .txt (a corpus)")
    name = dataset.get("name")
    if not isinstance(name, str):
        raise ValueError("a mapping needs 'name' (a built-in data set) or 'path' (your file)")
    return describe(name, source=source, check_files=check_files)


def option_keys(dataset: Any) -> tuple[str, Sequence[str]]:
    """The options a data set mapping may hold, and which loader they belong to."""
    if isinstance(dataset, Mapping) and "path" in dataset:
        key = "txt" if str(dataset["path"]).lower().endswith(".txt") else "npz"
        return key, ("path", *DATA_OPTIONS[key])
    name = dataset.get("name") if isinstance(dataset, Mapping) else dataset
    return str(name), ("name", *DATA_OPTIONS.get(str(name), ()))


def check_for_model(info: DataInfo, model: str) -> str | None:
    """Why ``model`` cannot train on ``info`` (``None`` when it can, or when not yet known)."""
    tasks, kinds = FAMILY_INPUTS[model]
    if info.task is not None and info.task not in tasks:
        return (
            f"model {model!r} cannot train on {info.label!r}, "
            f"a {info.task.replace('_', ' ')} data set"
        )
    if info.kind is not None and info.kind not in kinds:
        return (
            f"model {model!r} cannot train on {info.label!r}: its inputs are {info.kind} "
            f"(model {model!r} takes {', '.join(kinds)})"
        )
    return None


def _check_text(path: Path, given: str) -> None:
    if not path.is_file():
        raise ValueError(f"{given!r}: no such file (looked for {path})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{given!r}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"{given!r}: cannot read it ({exc.strerror})") from None
    if len(text) < 1000:
        raise ValueError(f"{given!r}: a corpus needs at least 1000 characters, it has {len(text)}")


def npz_kind(x_ndim: int, integer: bool) -> str:
    """The input kind of an array of samples with ``x_ndim`` dimensions (the first is samples)."""
    if x_ndim == 4:
        return "image"
    if x_ndim == 3:
        return "sequence"
    if x_ndim == 2:
        return "tokens" if integer else "vector"
    raise ValueError(
        f"x must have 2 to 4 dimensions (samples first: (N, D), (N, T, F), (N, C, H, W)), "
        f"it has {x_ndim}"
    )


def _check_npz(path: Path, given: str) -> str:
    import numpy as np

    if not path.is_file():
        raise ValueError(f"{given!r}: no such file (looked for {path})")
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{given!r}: not a readable .npz file (not a zip archive; write it with numpy.savez)"
        )
    try:
        with np.load(path, allow_pickle=False) as arrays:
            names = set(arrays.files)
            missing = [k for k in ("x", "y") if k not in names]
            if missing:
                raise ValueError(
                    f"{given!r} has no array {' or '.join(map(repr, missing))} "
                    f"(it holds: {', '.join(sorted(names)) or 'nothing'}; "
                    "needed: x, y, optional x_val, y_val)"
                )
            if ("x_val" in names) != ("y_val" in names):
                raise ValueError(f"{given!r}: give both x_val and y_val, or neither")
            pairs = [("x", "y")] + ([("x_val", "y_val")] if "x_val" in names else [])
            kind = None
            for xk, yk in pairs:
                x, y = arrays[xk], arrays[yk]
                if x.shape[0] != y.shape[0]:
                    raise ValueError(
                        f"{given!r}: {xk} has {x.shape[0]} samples but {yk} has {y.shape[0]}"
                    )
                if (
                    y.ndim != 1
                    or not np.issubdtype(y.dtype, np.integer)
                    or (y.size and y.min() < 0)
                ):
                    raise ValueError(f"{given!r}: {yk} must be a 1-D array of class ids 0, 1, ...")
                if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
                    raise ValueError(f"{given!r}: {xk} must be numeric, it is {x.dtype}")
                k = npz_kind(x.ndim, np.issubdtype(x.dtype, np.integer))
                if kind is not None and (k != kind or x.shape[1:] != arrays["x"].shape[1:]):
                    raise ValueError(
                        f"{given!r}: x_val's samples have shape {x.shape[1:]}, "
                        f"x's {arrays['x'].shape[1:]}"
                    )
                kind = k
            if arrays["x"].shape[0] < 2:
                raise ValueError(f"{given!r}: x needs at least 2 samples")
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{given!r}: not a readable .npz file ({exc})") from None
    except ValueError as exc:
        if str(exc).startswith(repr(given)):
            raise
        raise ValueError(f"{given!r}: {exc}") from None
    assert kind is not None
    return kind
