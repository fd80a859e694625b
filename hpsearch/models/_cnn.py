"""Convolutional image classifier: conv -> pool blocks, then dense layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from hpsearch.models._base import ModelFamily

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit


class CNNFamily(ModelFamily):
    """The classic shape: blocks of 3x3 convolutions with max-pooling, a dense layer, softmax.

    Hyperparameters (defaults): ``n_blocks`` (2), ``channels`` (32, the first block's
    filters; each later block doubles them, capped at 64 — the classic 32/64/64),
    ``kernel_size`` (3), ``dense_units`` (64), ``dropout`` (0.0), ``batch_norm`` (False).
    A block pools only while the feature map is at least 2x2, so 8x8 digits take up to 3.
    """

    name = "cnn"
    defaults: ClassVar[Mapping[str, Any]] = {
        "n_blocks": 2,
        "channels": 32,
        "kernel_size": 3,
        "dense_units": 64,
        "dropout": 0.0,
        "batch_norm": False,
    }

    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        from torch import nn

        in_ch, height, width = data.info["input_shape"]
        channels = int(self.param(params, "channels"))
        kernel = int(self.param(params, "kernel_size"))
        layers: list[nn.Module] = []
        for block in range(int(self.param(params, "n_blocks"))):
            out_ch = channels if block == 0 else channels * 2
            layers.append(nn.Conv2d(in_ch, out_ch, kernel, padding=kernel // 2))
            if self.param(params, "batch_norm"):
                layers.append(nn.BatchNorm2d(out_ch))
            layers.append(nn.ReLU())
            if min(height, width) >= 2:
                layers.append(nn.MaxPool2d(2))
                height, width = height // 2, width // 2
            in_ch = out_ch
        dense = int(self.param(params, "dense_units"))
        return nn.Sequential(
            *layers,
            nn.Flatten(),
            nn.Linear(in_ch * height * width, dense),
            nn.ReLU(),
            nn.Dropout(float(self.param(params, "dropout"))),
            nn.Linear(dense, int(data.info["n_classes"])),
        )
