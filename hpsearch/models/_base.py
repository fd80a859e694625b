"""The common base of the model families, and the parts the sequence families share."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit
    from hpsearch.training._loop import Trainer


class ModelFamily(ABC):
    """A family of models built from hyperparameters.

    Subclasses set ``name``, ``defaults`` and ``trainer`` and implement :meth:`build`.
    Hyperparameters a family does not know are left alone (they may be the trainer's:
    ``lr``, ``optimizer``, ``batch_size``, ...).
    """

    name: str
    #: The trainer class that trains it: a class, or ``"module:Class"`` (imported on first
    #: use, so that a family's module stays free of torch and of the training loop).
    trainer: type[Trainer] | str = "hpsearch.training._loop:SupervisedTrainer"
    #: Defaults of the hyperparameters this family reads (documented per family).
    defaults: ClassVar[Mapping[str, Any]] = {}

    @abstractmethod
    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        """Build a fresh model for ``data`` from ``params`` (missing ones take :attr:`defaults`)."""

    def trainer_class(self) -> type[Trainer]:
        """The class of :attr:`trainer` (resolved from ``"module:Class"`` if need be)."""
        return resolve_trainer(self.trainer)

    def param(self, params: Mapping[str, Any], key: str) -> Any:
        return params.get(key, self.defaults[key])


def resolve_trainer(ref: type[Trainer] | str) -> type[Trainer]:
    """A trainer class, given as itself or as ``"module:Class"``."""
    if not isinstance(ref, str):
        return ref
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"a trainer is a class or 'module:Class', got {ref!r}")
    cls: type[Trainer] = getattr(importlib.import_module(module), name)
    return cls
