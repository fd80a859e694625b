"""The epoch loop of a classifier: sharded batches, autocast, grad scaling, evaluation.

Batches are drawn from in-memory tensors by index (no DataLoader workers: the data sets are
small and a trial's process is already one of many). Each epoch's order comes from
``seed + epoch``, so a resumed trial sees the same batches it would have seen.

Under data parallelism the sampler is distributed by batch: global batch i is the same
on every world size, and rank r trains on its r-th share of it. With DDP averaging the
gradients, k ranks then take the same steps as one rank with the same global batch (up to
floating point, dropout and batch-norm statistics), which is what makes trials of
different set sizes comparable.

Batch semantics: ``batch_size`` is the **global** batch (each rank gets ``batch_size //
world_size``). Set ``per_rank_batch: true`` to make it per rank (the global batch then grows
with the set), and ``lr_scaling: linear`` to multiply ``lr`` by the world size (the linear
scaling rule of Goyal et al., 2017, for a per-rank batch).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

from hpsearch.training._amp import autocast, grad_scaler

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")


def make_optimizer(parameters: Any, params: Mapping[str, Any]) -> torch.optim.Optimizer:
    """``optimizer`` (adam), ``lr`` (1e-3), ``weight_decay`` (0), ``momentum`` (0.9, for sgd/rmsprop)."""
    import torch

    name = str(params.get("optimizer", "adam")).lower()
    lr = float(params.get("lr", 1e-3))
    wd = float(params.get("weight_decay", 0.0))
    if name == "adam":
        return torch.optim.Adam(parameters, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=wd)
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=float(params.get("momentum", 0.9)), weight_decay=wd)
    if name == "rmsprop":
        return torch.optim.RMSprop(parameters, lr=lr, momentum=float(params.get("momentum", 0.0)), weight_decay=wd)
    raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")


class ClassifierTrainer:
    """Trains and evaluates a classifier on one device, optionally one rank of several."""

    def __init__(
        self,
        model: torch.nn.Module,
        params: Mapping[str, Any],
        *,
        device: torch.device,
        precision: str,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        import torch

        self.model = model
        self.device = device
        self.precision = precision
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        batch = int(params.get("batch_size", 64))
        self.batch_size = batch * world_size if params.get("per_rank_batch") else batch  # global
        self.grad_clip = params.get("grad_clip")
        self.optimizer = make_optimizer(model.parameters(), params)
        self.scaler = grad_scaler(precision, device)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.skipped_steps = 0

    def _batches(self, n: int, epoch: int) -> list[torch.Tensor]:
        """This rank's share of each global batch of the epoch."""
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(n, generator=g)
        out = []
        for i in range(0, n, self.batch_size):
            share = order[i : i + self.batch_size][self.rank :: self.world_size]
            if share.numel():
                out.append(share)
        return out

    def _sum(self, *values: float) -> list[float]:
        """Sum values across ranks (identity alone)."""
        if self.world_size == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t)
        return t.tolist()

    def train_epoch(self, data: DataSplit, epoch: int) -> dict[str, float]:
        """One pass over this rank's shard; returns mean loss, samples and samples/s."""
        import torch

        self.model.train()
        x_all, y_all = data.x_train, data.y_train
        total = torch.zeros((), dtype=torch.float64)
        n_seen = 0
        start = time.perf_counter()
        for idx in self._batches(x_all.shape[0], epoch):
            x = x_all[idx].to(self.device, non_blocking=True)
            y = y_all[idx].to(self.device, non_blocking=True)
            self.optimizer.zero_grad(set_to_none=True)
            with autocast(self.precision, self.device):
                loss = self.loss_fn(self.model(x), y)
            self.scaler.scale(loss).backward()
            if self.grad_clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.grad_clip))
            scale_before = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if self.scaler.is_enabled() and self.scaler.get_scale() < scale_before:
                self.skipped_steps += 1  # fp16 overflow: the scaler skipped this step
            total += loss.detach().double() * idx.shape[0]
            n_seen += int(idx.shape[0])
        seconds = time.perf_counter() - start
        loss_sum, n_all = self._sum(float(total), float(n_seen))
        return {
            "train_loss": loss_sum / max(n_all, 1.0),
            "samples": n_all,
            "samples_per_s": n_all / seconds if seconds > 0 else 0.0,
        }

    @staticmethod
    def _no_grad() -> Any:
        import torch

        return torch.inference_mode()

    def evaluate(self, data: DataSplit) -> dict[str, float]:
        """Validation loss and accuracy over the whole validation split (each rank its share)."""
        import torch

        self.model.eval()
        model = getattr(self.model, "module", self.model)  # no DDP sync for evaluation
        with self._no_grad(), autocast(self.precision, self.device):
            x = data.x_val[self.rank :: self.world_size].to(self.device)
            y = data.y_val[self.rank :: self.world_size].to(self.device)
            logits = model(x).float()
            loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
            correct = (logits.argmax(dim=1) == y).sum()
        loss_sum, n_correct, n = self._sum(float(loss), float(correct), float(y.shape[0]))
        return {"val_loss": loss_sum / n, "val_accuracy": n_correct / n}

    def state_dict(self) -> dict[str, Any]:
        model = getattr(self.model, "module", self.model)
        return {
            "model": model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        model = getattr(self.model, "module", self.model)
        model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
