"""LSTMs: a sequence classifier, or a next-token language model on a text corpus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from hpsearch.models._base import ModelFamily

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit


class LSTMFamily(ModelFamily):
    """An LSTM for the task of its data set.

    * Language model (a text corpus): embedding -> LSTM -> dense softmax over the
      vocabulary at every step; metrics ``val_perplexity`` (the default), ``val_loss``
      (nats per token) and ``val_accuracy`` (of the next token).
    * Classification (sequences, images read row by row, token windows): embedding or
      projection -> LSTM -> dense over the last step; metric ``val_accuracy``.

    Hyperparameters (defaults): ``embedding_dim`` (64), ``hidden_size`` (128), ``num_layers``
    (1), ``dropout`` (0.0), ``bidirectional`` (False, classification only), and the
    trainer's ``seq_len`` (64: characters per training sequence of a language model) and
    ``grad_clip`` (1.0 for a language model, none otherwise).
    """

    name = "lstm"
    defaults: ClassVar[Mapping[str, Any]] = {
        "embedding_dim": 64,
        "hidden_size": 128,
        "num_layers": 1,
        "dropout": 0.0,
        "bidirectional": False,
    }

    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        from hpsearch.models._layers import LanguageModel, SequenceClassifier

        embedding = int(self.param(params, "embedding_dim"))
        hidden = int(self.param(params, "hidden_size"))
        layers = int(self.param(params, "num_layers"))
        dropout = float(self.param(params, "dropout"))
        if data.task == "language_model":
            return LanguageModel(int(data.info["vocab_size"]), embedding, hidden, layers, dropout)
        return SequenceClassifier(
            data,
            cell="lstm",
            input_size=embedding,
            hidden_size=hidden,
            num_layers=layers,
            bidirectional=bool(self.param(params, "bidirectional")),
            dropout=dropout,
        )
