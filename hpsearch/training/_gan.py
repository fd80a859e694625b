"""Adversarial training, and an honest per-epoch measure of sample quality.

The metric, ``val_mmd``, is the squared maximum mean discrepancy (Gretton et al., 2012)
between samples of the generator and the held-out validation data, with a Gaussian kernel
at three bandwidths (0.5, 1 and 2 times the median distance between validation samples,
fixed per data set so that every trial is measured alike), unbiased estimator. Lower is
better: two samples of the same distribution score about 0, and uniform noise scores far
higher than a trained generator. The noise the generator is measured on is fixed, so the
value moves only when the generator does.

The discriminator sees real and fake samples in one batch (one forward pass, so DDP syncs
its gradients once); the generator's step does not sync the discriminator's gradients,
which the next discriminator step clears anyway.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from hpsearch.training._amp import autocast
from hpsearch.training._loop import Trainer, make_optimizer

if TYPE_CHECKING:
    import numpy as np
    import torch

    from hpsearch.data import DataSplit
    from hpsearch.models import GAN
    from hpsearch.trial import TrialContext

#: Generated and real samples compared by the MMD each epoch (at most).
MMD_SAMPLES = 512
MMD_SCALES = (0.5, 1.0, 2.0)
GRID = 8


def to_unit_range(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """Map data from [lo, hi] to the generator's [-1, 1]."""
    return (x - lo) / max(hi - lo, 1e-12) * 2.0 - 1.0


def median_bandwidth(x: torch.Tensor) -> float:
    """The median pairwise distance between the rows of ``x`` (flattened samples)."""
    import torch

    d = torch.cdist(x, x)
    return float(d[~torch.eye(d.shape[0], dtype=torch.bool)].median())


def mmd2(x: torch.Tensor, y: torch.Tensor, bandwidth: float) -> float:
    """Unbiased squared MMD between the rows of ``x`` and ``y`` (multi-scale Gaussian kernel)."""
    import torch

    x, y = x.double(), y.double()
    dxx, dyy, dxy = torch.cdist(x, x) ** 2, torch.cdist(y, y) ** 2, torch.cdist(x, y) ** 2
    kxx, kyy, kxy = torch.zeros_like(dxx), torch.zeros_like(dyy), torch.zeros_like(dxy)
    for s in MMD_SCALES:
        gamma = 1.0 / (2.0 * (s * bandwidth) ** 2)
        kxx = kxx + torch.exp(-gamma * dxx)
        kyy = kyy + torch.exp(-gamma * dyy)
        kxy = kxy + torch.exp(-gamma * dxy)
    m, n = x.shape[0], y.shape[0]
    term_x = (kxx.sum() - kxx.diagonal().sum()) / (m * (m - 1))
    term_y = (kyy.sum() - kyy.diagonal().sum()) / (n * (n - 1))
    return float(term_x + term_y - 2.0 * kxy.mean())


class GANTrainer(Trainer):
    """Trains a :class:`hpsearch.models._layers.GAN`: one discriminator step, then one
    generator step, per batch (``d_steps`` discriminator steps if set).

    Hyperparameters (defaults): ``lr`` (2e-4, both networks; ``lr_d`` for the discriminator
    alone), ``beta1`` (0.5), ``beta2`` (0.999), ``batch_size`` (64), ``label_smoothing``
    (0.0: the real label is ``1 - label_smoothing``), ``d_steps`` (1). Per epoch it logs
    ``g_loss``, ``d_loss``, ``d_real`` and ``d_fake`` (the discriminator's mean probability
    that real and generated samples are real) and ``val_mmd``.
    """

    loss_keys = ("g_loss", "d_loss")

    def __init__(
        self, model: torch.nn.Module, params: Mapping[str, Any], data: DataSplit, **kwargs: Any
    ) -> None:
        import torch

        super().__init__(params, **kwargs)
        model = cast("GAN", model.to(self.device))
        self.gan = model
        self.latent_dim = int(model.latent_dim)
        self.generator = self._ddp(model.generator)
        self.discriminator = self._ddp(model.discriminator)
        lr = float(params.get("lr", 2e-4))
        self.opt_g = make_optimizer(
            self.generator.parameters(), {**params, "lr": lr}, betas=(0.5, 0.999)
        )
        self.opt_d = make_optimizer(
            self.discriminator.parameters(),
            {**params, "lr": float(params.get("lr_d", lr))},
            betas=(0.5, 0.999),
        )
        self.smoothing = float(params.get("label_smoothing", 0.0))
        self.d_steps = int(params.get("d_steps", 1))
        self.lo, self.hi = float(data.x_train.min()), float(data.x_train.max())
        self.x_train = to_unit_range(data.x_train, self.lo, self.hi)
        real = to_unit_range(data.x_val[:MMD_SAMPLES], self.lo, self.hi).flatten(1)
        self.real_val = real
        self.bandwidth = median_bandwidth(real)
        g = torch.Generator().manual_seed(self.seed + 17)
        self.eval_noise = torch.randn(real.shape[0], self.latent_dim, generator=g)
        self.grid_noise = torch.randn(GRID * GRID, self.latent_dim, generator=g)

    def _noise(self, n: int, g: torch.Generator) -> torch.Tensor:
        import torch

        return torch.randn(n, self.latent_dim, generator=g).to(self.device, non_blocking=True)

    def train_epoch(self, data: DataSplit, epoch: int) -> dict[str, float]:
        import torch
        import torch.nn.functional as F

        self.generator.train()
        self.discriminator.train()
        self._seed_epoch(epoch)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 1)
        sums = torch.zeros(4, dtype=torch.float64)  # d_loss, g_loss, d_real, d_fake (x samples)
        n_seen = 0
        start = time.perf_counter()
        for idx in self._batches(self.x_train.shape[0], epoch):
            real = self.x_train[idx].to(self.device, non_blocking=True)
            b = real.shape[0]
            targets = torch.cat(
                [
                    torch.full((b, 1), 1.0 - self.smoothing, device=self.device),
                    torch.zeros((b, 1), device=self.device),
                ]
            )
            for _ in range(self.d_steps):
                self.opt_d.zero_grad(set_to_none=True)
                with autocast(self.precision, self.device):
                    with torch.no_grad():
                        fake = self.generator(self._noise(b, g))
                    logits = self.discriminator(torch.cat([real, fake.to(real.dtype)])).float()
                    d_loss = F.binary_cross_entropy_with_logits(logits, targets)
                self._step(d_loss, self.opt_d, self.discriminator.parameters(), None)
                self._update_scaler()
            self.opt_g.zero_grad(set_to_none=True)
            no_sync = getattr(self.discriminator, "no_sync", contextlib.nullcontext)
            with no_sync(), autocast(self.precision, self.device):
                fake_logits = self.discriminator(self.generator(self._noise(b, g))).float()
                g_loss = F.binary_cross_entropy_with_logits(
                    fake_logits, torch.ones_like(fake_logits)
                )
            self._step(g_loss, self.opt_g, self.generator.parameters(), None)
            self._update_scaler()
            with torch.no_grad():
                p = torch.sigmoid(logits)
                sums += (
                    torch.stack(
                        [
                            d_loss.detach().double(),
                            g_loss.detach().double(),
                            p[:b].mean().double(),
                            p[b:].mean().double(),
                        ]
                    ).cpu()
                    * b
                )
            n_seen += b
        seconds = time.perf_counter() - start
        *totals, n_all = self._sum(*sums.tolist(), float(n_seen))
        d_loss_m, g_loss_m, d_real, d_fake = (t / max(n_all, 1.0) for t in totals)
        return {
            "d_loss": d_loss_m,
            "g_loss": g_loss_m,
            "d_real": d_real,
            "d_fake": d_fake,
            "samples": n_all,
            "samples_per_s": n_all / seconds if seconds > 0 else 0.0,
        }

    def generate(self, noise: torch.Tensor) -> torch.Tensor:
        """Samples for ``noise``, in [-1, 1], float32 on the CPU (generator in eval mode)."""
        generator = getattr(self.generator, "module", self.generator)
        generator.eval()
        with self._inference(), autocast(self.precision, self.device):
            return generator(noise.to(self.device)).float().cpu()

    def evaluate(self, data: DataSplit) -> dict[str, float]:
        """``val_mmd``: the same on every rank (same weights, same fixed noise), so no sync."""
        fake = self.generate(self.eval_noise).flatten(1)
        return {"val_mmd": mmd2(fake, self.real_val, self.bandwidth)}

    def sample_grid(self) -> np.ndarray:
        """An 8x8 grid of samples from fixed noise as an RGB ``uint8`` image (images only)."""
        import numpy as np
        import torch

        shape = tuple(self.gan.sample_shape)
        x = self.generate(self.grid_noise)
        if len(shape) == 2:
            x = x.unsqueeze(1)
        elif len(shape) != 3:
            x = x.reshape(x.shape[0], 1, 1, -1)
        x = ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        x = x[:, :3]
        n, c, h, w = x.shape
        zoom = max(1, 64 // max(h, w))
        x = x.repeat_interleave(zoom, 2).repeat_interleave(zoom, 3)
        h, w, pad = h * zoom, w * zoom, 2
        grid = torch.full(
            (c, GRID * (h + pad) + pad, GRID * (w + pad) + pad), 255, dtype=torch.uint8
        )
        for i in range(n):
            r, col = divmod(i, GRID)
            top, left = pad + r * (h + pad), pad + col * (w + pad)
            grid[:, top : top + h, left : left + w] = x[i]
        return np.ascontiguousarray(grid.permute(1, 2, 0).numpy())

    def finish(self, ctx: TrialContext) -> None:
        if ctx.is_main:
            ctx.log_image(self.sample_grid(), "samples.png")

    def state_dict(self) -> dict[str, Any]:
        return {
            "gan": self.gan.state_dict(),
            "opt_g": self.opt_g.state_dict(),
            "opt_d": self.opt_d.state_dict(),
            "scaler": self.scaler.state_dict(),
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.gan.load_state_dict(state["gan"])
        self.opt_g.load_state_dict(state["opt_g"])
        self.opt_d.load_state_dict(state["opt_d"])
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
