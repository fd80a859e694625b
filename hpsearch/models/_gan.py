"""A generative adversarial network of dense layers: generator and discriminator."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from hpsearch.models._base import ModelFamily

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit


class GANFamily(ModelFamily):
    """Generator: noise of ``latent_dim`` -> dense layers -> a sample with tanh (in [-1, 1]).
    Discriminator: sample -> dense layers with LeakyReLU(0.2) -> one logit.

    Trained adversarially with the classic Adam setting (``lr`` 2e-4, ``beta1`` 0.5); see
    :class:`hpsearch.training.GANTrainer` for the metric (a kernel MMD to held-out data).
    Hyperparameters (defaults): ``latent_dim`` (64), ``g_hidden`` (256), ``g_layers`` (2),
    ``d_hidden`` (256), ``d_layers`` (2), ``d_dropout`` (0.3), ``batch_norm`` (True, in the
    generator).
    """

    name = "gan"
    trainer = "hpsearch.training:GANTrainer"
    defaults: ClassVar[Mapping[str, Any]] = {
        "latent_dim": 64,
        "g_hidden": 256,
        "g_layers": 2,
        "d_hidden": 256,
        "d_layers": 2,
        "d_dropout": 0.3,
        "batch_norm": True,
    }

    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        from torch import nn

        from hpsearch.models._layers import GAN

        shape = tuple(int(s) for s in data.info["input_shape"])
        size = math.prod(shape)
        latent = int(self.param(params, "latent_dim"))

        g_layers: list[nn.Module] = []
        width = latent
        for _ in range(int(self.param(params, "g_layers"))):
            hidden = int(self.param(params, "g_hidden"))
            g_layers.append(nn.Linear(width, hidden))
            if self.param(params, "batch_norm"):
                g_layers.append(nn.BatchNorm1d(hidden))
            g_layers.append(nn.ReLU())
            width = hidden
        g_layers += [nn.Linear(width, size), nn.Tanh(), nn.Unflatten(1, shape)]

        d_layers: list[nn.Module] = [nn.Flatten()]
        width = size
        for _ in range(int(self.param(params, "d_layers"))):
            hidden = int(self.param(params, "d_hidden"))
            d_layers += [
                nn.Linear(width, hidden),
                nn.LeakyReLU(0.2),
                nn.Dropout(float(self.param(params, "d_dropout"))),
            ]
            width = hidden
        d_layers.append(nn.Linear(width, 1))

        return GAN(nn.Sequential(*g_layers), nn.Sequential(*d_layers), latent, shape)
