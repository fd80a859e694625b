"""Built-in model families: each builds a ``torch.nn.Module`` from hyperparameters.

Importing this package is cheap; a family's module (and torch) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.models._base import ModelFamily
    from hpsearch.models._layers import GAN
    from hpsearch.models._transformer_nn import TransformerLM as TransformerLM

_FAMILIES = {
    "cnn": "hpsearch.models._cnn:CNNFamily",
    "rnn": "hpsearch.models._rnn:RNNFamily",
    "lstm": "hpsearch.models._lstm:LSTMFamily",
    "gan": "hpsearch.models._gan:GANFamily",
    "transformer": "hpsearch.models._transformer:TransformerFamily",
}

__all__ = ["GAN", "ModelFamily", "TransformerLM", "available", "get_family"]

#: Public names imported on first use (they import torch).
__getattr__ = lazy_attributes(
    __name__,
    {
        "._base": ("ModelFamily",),
        "._layers": ("GAN",),
        "._transformer_nn": ("TransformerLM",),
    },
)


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
