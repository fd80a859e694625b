"""Sequence classifier: embedding or projection -> simple recurrent layer -> dense output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from hpsearch.models._base import ModelFamily

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit


class RNNFamily(ModelFamily):
    """A simple recurrent sequence classifier (sigmoid for two classes, softmax for more).

    Input: token ids get an embedding, real-valued steps a linear projection (the digits
    read row by row: 8 steps of 8 values). Hyperparameters (defaults): ``cell`` (gru; or
    rnn, the Elman cell), ``embedding_dim`` (32), ``hidden_size`` (64), ``num_layers`` (1),
    ``bidirectional`` (False), ``dropout`` (0.0).
    """

    name = "rnn"
    defaults: ClassVar[Mapping[str, Any]] = {
        "cell": "gru",
        "embedding_dim": 32,
        "hidden_size": 64,
        "num_layers": 1,
        "bidirectional": False,
        "dropout": 0.0,
    }

    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        from hpsearch.models._layers import SequenceClassifier

        cell = str(self.param(params, "cell"))
        if cell not in ("rnn", "gru"):
            raise ValueError(
                f"rnn: cell must be rnn or gru (model: lstm is the LSTM), got {cell!r}"
            )
        return SequenceClassifier(
            data,
            cell=cell,
            input_size=int(self.param(params, "embedding_dim")),
            hidden_size=int(self.param(params, "hidden_size")),
            num_layers=int(self.param(params, "num_layers")),
            bidirectional=bool(self.param(params, "bidirectional")),
            dropout=float(self.param(params, "dropout")),
        )
