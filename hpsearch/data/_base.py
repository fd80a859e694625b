"""Data sets as in-memory tensors: small enough to load once per worker process and reuse.

Every data set is split into train and validation by the study's seed (or has its own
validation arrays), so all trials of a study see the same split, and a resumed trial the
same one it started with.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.data import _catalog
from hpsearch.data._split import DataSplit, classification_split
from hpsearch.exceptions import SpecError

if TYPE_CHECKING:
    import torch


def _digit_images(options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    import torch
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    size = int(options.get("size", 8))
    if size != 8:
        x = torch.nn.functional.interpolate(
            x, size=(size, size), mode="bilinear", align_corners=False
        )
    return x, y


def _digits(options: Mapping[str, Any], seed: int, source: Path | None) -> DataSplit:
    """scikit-learn's digits: 1,797 grey 8x8 images of 10 classes, scaled to [0, 1].

    Options: ``size`` (resize to size x size, bilinear), ``val_fraction`` (default 0.2),
    ``limit`` (use only the first ``limit`` training images).
    """
    x, y = _digit_images(options)
    return classification_split(
        "digits",
        x,
        y,
        options=options,
        seed=seed,
        info={"kind": "image", "source": "sklearn.datasets.load_digits"},
    )


def _digits_seq(options: Mapping[str, Any], seed: int, source: Path | None) -> DataSplit:
    """The digits read row by row: sequences of ``size`` steps of ``size`` grey values."""
    x, y = _digit_images(options)
    return classification_split(
        "digits-seq",
        x.squeeze(1),
        y,
        options=options,
        seed=seed,
        info={"kind": "sequence", "source": "sklearn.datasets.load_digits, rows as steps"},
    )


def _python_docs(options: Mapping[str, Any], seed: int, source: Path | None) -> DataSplit:
    from hpsearch.data._text import corpus_split, python_docs_text

    return corpus_split(
        "python-docs",
        python_docs_text(),
        options=options,
        seed=seed,
        source="pydoc_data.topics (CPython's reference documentation)",
    )


def _docs_or_code(options: Mapping[str, Any], seed: int, source: Path | None) -> DataSplit:
    from hpsearch.data._text import docs_or_code

    return docs_or_code(options, seed)


_LOADERS: dict[str, Callable[[Mapping[str, Any], int, Path | None], DataSplit]] = {
    "digits": _digits,
    "digits-seq": _digits_seq,
    "python-docs": _python_docs,
    "docs-or-code": _docs_or_code,
}


def _load(spec_json: str, seed: int, source: str | None) -> DataSplit:
    from hpsearch.data import _files

    dataset = json.loads(spec_json)
    src = Path(source) if source else None
    if isinstance(dataset, str) and ":" in dataset:
        return _files.load_function(dataset, seed=seed, source=src)
    if isinstance(dataset, str):
        dataset = {"name": dataset}
    options = {k: v for k, v in dataset.items() if k not in ("name", "path")}
    if "path" in dataset:
        path = _catalog.resolve_path(dataset["path"], src)
        if path.suffix.lower() == ".txt":
            return _files.load_text(path, options=options, seed=seed)
        return _files.load_npz(path, options=options, seed=seed)
    loader = _LOADERS.get(dataset.get("name"))
    if loader is None:
        raise SpecError(
            [
                f"objective.dataset: unknown data set {dataset.get('name')!r} "
                f"(built-in: {', '.join(_LOADERS)})"
            ]
        )
    return loader(options, seed, src)


_load_cached = functools.lru_cache(maxsize=8)(_load)


def load_dataset(
    dataset: str | Mapping[str, Any], *, seed: int | None, source: Path | str | None = None
) -> DataSplit:
    """Load a data set as a study file names it, split by ``seed`` (cached: one load per process).

    ``source`` is the study file: a relative ``path`` is looked up next to it first.
    """
    return _load_cached(
        json.dumps(dataset, sort_keys=True), int(seed or 0), str(source) if source else None
    )
