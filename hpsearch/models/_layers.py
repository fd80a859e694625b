"""Layers the sequence families share (imported on first use: it imports torch)."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from torch import nn

from hpsearch.data import DataSplit

# Switching oneDNN off (see recurrent) restores its TF32 setting, which warns on CPU builds.
warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")


def class_outputs(n_classes: int) -> int:
    """One logit (sigmoid) for two classes, one per class (softmax) for more."""
    return 1 if n_classes == 2 else n_classes


def recurrent(layer: nn.Module, x: torch.Tensor) -> Any:
    """Run a recurrent layer, working around oneDNN under CPU autocast.

    oneDNN's LSTM has no bf16 kernel on CPUs without AVX512-BF16 and fails with "could not
    create a primitive descriptor"; PyTorch's own kernels work, so oneDNN is switched off for
    this call only. On CUDA, and in fp32, nothing changes.
    """
    if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        with torch.backends.mkldnn.flags(enabled=False):
            return layer(x)
    return layer(x)


class Steps(nn.Module):
    """Real-valued input as a sequence of steps ``(B, T, F)``, projected to a width."""

    def __init__(self, kind: str, features: int, width: int) -> None:
        super().__init__()
        self.kind = kind
        self.proj = nn.Linear(features, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "image":  # (B, C, H, W) -> rows: (B, H, C * W)
            x = x.permute(0, 2, 1, 3).flatten(2)
        elif self.kind == "vector":  # (B, D) -> (B, D, 1)
            x = x.unsqueeze(-1)
        return self.proj(x)


def sequence_input(data: DataSplit, width: int) -> nn.Module:
    """The input layer of a sequence model for ``data``.

    Tokens get an embedding of ``width``; real-valued steps (sequences, the rows of images,
    the entries of vectors) a linear projection to ``width``.
    """
    kind = data.info["kind"]
    if kind == "tokens":
        return nn.Embedding(int(data.info["vocab_size"]), width)
    shape = tuple(data.info["input_shape"])
    features = {"sequence": shape[-1], "image": shape[0] * shape[-1], "vector": 1}[kind]
    return Steps(kind, features, width)


class SequenceClassifier(nn.Module):
    """input layer -> ``cell`` (rnn | gru | lstm) -> dense over the last step's state."""

    CELLS: ClassVar[dict[str, type[nn.Module]]] = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}

    def __init__(
        self,
        data: DataSplit,
        *,
        cell: str,
        input_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        dropout: float,
    ) -> None:
        super().__init__()
        if cell not in self.CELLS:
            raise ValueError(f"cell must be one of {', '.join(self.CELLS)}, got {cell!r}")
        self.bidirectional = bidirectional
        self.embed = sequence_input(data, input_size)
        self.rnn = self.CELLS[cell](
            input_size,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.head = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(
                hidden_size * (2 if bidirectional else 1),
                class_outputs(int(data.info["n_classes"])),
            ),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, state = recurrent(self.rnn, self.embed(x))
        h = state[0] if isinstance(state, tuple) else state  # an LSTM's state is (h, c)
        last = h[-2:].transpose(0, 1).flatten(1) if self.bidirectional else h[-1]
        return self.head(last)


class LanguageModel(nn.Module):
    """embedding -> LSTM -> dense over the vocabulary: ``(B, T)`` ids to ``(B, T, V)`` logits."""

    def __init__(
        self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(
            embedding,
            hidden,
            num_layers=layers,
            batch_first=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = recurrent(self.lstm, self.embed(x))
        return self.out(self.drop(h))


class GAN(nn.Module):
    """The two networks of a GAN, trained by :class:`hpsearch.training.GANTrainer`."""

    def __init__(
        self,
        generator: nn.Module,
        discriminator: nn.Module,
        latent_dim: int,
        shape: tuple[int, ...],
    ) -> None:
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.latent_dim = latent_dim
        self.sample_shape = shape
