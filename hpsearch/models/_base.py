"""The common base of the model families, and the parts the sequence families share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit


class ModelFamily(ABC):
    """A family of models built from hyperparameters.

    Subclasses set ``name``, ``defaults`` and ``trainer`` and implement :meth:`build`.
    Hyperparameters a family does not know are left alone (they may be the trainer's:
    ``lr``, ``optimizer``, ``batch_size``, ...).
    """

    name: str
    #: The trainer class that trains it: a class, or ``"module:Class"`` (imported on first
    #: use, so that a family's module stays free of torch and of the training loop, which
    #: sits in a room above the models: :class:`hpsearch.training.Trainer`).
    trainer: type[Any] | str = "hpsearch.training:SupervisedTrainer"
    #: Defaults of the hyperparameters this family reads (documented per family).
    defaults: ClassVar[Mapping[str, Any]] = {}

    @abstractmethod
    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        """Build a fresh model for ``data`` from ``params`` (missing ones take :attr:`defaults`)."""

    def param(self, params: Mapping[str, Any], key: str) -> Any:
        return params.get(key, self.defaults[key])
