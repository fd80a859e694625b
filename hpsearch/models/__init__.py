"""Built-in model families: each builds a ``torch.nn.Module`` from hyperparameters.

Importing this package is cheap; a family's module (and torch) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.models._base import ModelFamily
    from hpsearch.models._transformer import train_language_model as train_language_model
    from hpsearch.models._transformer_nn import TransformerLM as TransformerLM

_FAMILIES = {
    "cnn": "hpsearch.models._cnn:CNNFamily",
    "rnn": "hpsearch.models._rnn:RNNFamily",
    "lstm": "hpsearch.models._lstm:LSTMFamily",
    "gan": "hpsearch.models._gan:GANFamily",
    "transformer": "hpsearch.models._transformer:TransformerFamily",
}

#: Public names imported on first use (they import torch).
_LAZY = {
    "TransformerLM": "hpsearch.models._transformer_nn",
    "train_language_model": "hpsearch.models._transformer",
}

__all__ = ["TransformerLM", "available", "get_family", "train_language_model"]


def __getattr__(name: str) -> Any:
    """``TransformerLM`` and ``train_language_model``, imported on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def available() -> tuple[str, ...]:
    """The names of the built-in families."""
    return tuple(_FAMILIES)


def get_family(name: str) -> ModelFamily:
    """The family registered under ``name``."""
    try:
        module, cls = _FAMILIES[name].split(":")
    except KeyError:
        raise KeyError(
            f"unknown model family {name!r} (built-in: {', '.join(_FAMILIES)})"
        ) from None
    return getattr(importlib.import_module(module), cls)()
