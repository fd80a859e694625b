"""The epoch loops: sharded batches, autocast, grad scaling, evaluation.

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

import importlib
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpsearch.spec import Strategy
from hpsearch.training._amp import autocast, grad_scaler

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit
    from hpsearch.trial import TrialContext

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")

#: Samples per forward pass when evaluating (bounds the memory evaluation takes).
EVAL_CHUNK = 1024


def make_optimizer(
    parameters: Any,
    params: Mapping[str, Any],
    *,
    lr: float = 1e-3,
    betas: tuple[float, float] | None = None,
) -> torch.optim.Optimizer:
    """``optimizer`` (adam), ``lr``, ``weight_decay`` (0), ``momentum`` (0.9, for sgd/rmsprop),
    ``beta1`` and ``beta2`` (Adam's, 0.9 and 0.999 unless the caller says otherwise)."""
    import torch

    name = str(params.get("optimizer", "adam")).lower()
    lr = float(params.get("lr", lr))
    wd = float(params.get("weight_decay", 0.0))
    b1, b2 = betas or (0.9, 0.999)
    adam_betas = (float(params.get("beta1", b1)), float(params.get("beta2", b2)))
    if name == "adam":
        return torch.optim.Adam(parameters, lr=lr, betas=adam_betas, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=lr, betas=adam_betas, weight_decay=wd)
    if name == "sgd":
        return torch.optim.SGD(
            parameters, lr=lr, momentum=float(params.get("momentum", 0.9)), weight_decay=wd
        )
    if name == "rmsprop":
        return torch.optim.RMSprop(
            parameters, lr=lr, momentum=float(params.get("momentum", 0.0)), weight_decay=wd
        )
    raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")


class Trainer(ABC):
    """What every trainer shares: the batch sampler, cross-rank sums, DDP, checkpoint state.

    Subclasses implement :meth:`train_epoch` and :meth:`evaluate` (dicts of metrics) and
    name the losses that must stay finite in :attr:`loss_keys`.
    """

    loss_keys: tuple[str, ...] = ("train_loss",)

    def __init__(
        self,
        params: Mapping[str, Any],
        *,
        device: torch.device,
        precision: str,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        strategy: Strategy | str = Strategy.DDP,
    ) -> None:
        self.params = params
        # How the ranks share the model (ddp or fsdp): the member, also when named by a string.
        self.strategy = Strategy(strategy)
        self.device = device
        self.precision = precision
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        batch = int(params.get("batch_size", 64))
        self.batch_size = batch * world_size if params.get("per_rank_batch") else batch  # global
        self.scaler = grad_scaler(precision, device)
        self.skipped_steps = 0

    def _seed_epoch(self, epoch: int) -> None:
        """Seed dropout and other global randomness by epoch (and rank): a trial resumed from
        a checkpoint trains its next epoch exactly as it would have without the break."""
        import torch

        torch.manual_seed((self.seed * 1_000_003 + epoch) * 131 + self.rank)

    def _ddp(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.world_size == 1:
            return module
        if self.strategy is Strategy.FSDP:
            import warnings

            from hpsearch.training._fsdp import shard

            # FSDP2 warns of every layer whose output is a view (any Linear on a batch of
            # sequences), in case the caller changes it in place; the built-in trainers never
            # do (their sharded losses match one rank's), so the warning would only be noise.
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* view tensor")
            return shard(
                module, precision=self.precision, world_size=self.world_size, device=self.device
            )
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(
            module, device_ids=[self.device] if self.device.type == "cuda" else None
        )

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

    def _eval_chunks(self, n_local: int, n_total: int) -> list[slice]:
        """Pieces of this rank's share of the validation data, one forward pass each. Under
        fsdp every forward all-gathers parameters, so every rank takes the same number."""
        if self.strategy is not Strategy.FSDP or self.world_size == 1:
            return [slice(i, i + EVAL_CHUNK) for i in range(0, n_local, EVAL_CHUNK)]
        per_rank = math.ceil(n_total / self.world_size)
        count = max(1, math.ceil(per_rank / EVAL_CHUNK))
        size = max(1, math.ceil(n_local / count))
        return [slice(i * size, (i + 1) * size) for i in range(count)]

    def _sum(self, *values: float) -> list[float]:
        """Sum values across ranks (identity alone)."""
        if self.world_size == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(
            values, dtype=torch.float64, device=self.device if self.device.type == "cuda" else "cpu"
        )
        dist.all_reduce(t)
        return t.tolist()

    def _step(
        self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, parameters: Any, grad_clip: Any
    ) -> None:
        """Backward, optional clipping, a (scaled) optimizer step; counts fp16 overflows."""
        import torch

        self.scaler.scale(loss).backward()
        if grad_clip:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, float(grad_clip))
        self.scaler.step(optimizer)

    def _update_scaler(self) -> None:
        scale_before = self.scaler.get_scale()
        self.scaler.update()
        if self.scaler.is_enabled() and self.scaler.get_scale() < scale_before:
            self.skipped_steps += 1  # fp16 overflow: the scaler skipped this step

    @abstractmethod
    def train_epoch(self, data: DataSplit, epoch: int) -> dict[str, float]:
        """One pass over this rank's shard of the training data; the epoch's losses and
        throughput."""

    @abstractmethod
    def evaluate(self, data: DataSplit) -> dict[str, float]:
        """The validation metrics (the same on every rank)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the trainer (models, optimizers, scaler)."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def finish(self, ctx: TrialContext) -> None:  # noqa: B027 (optional hook)
        """At the end of a trial that was not pruned: log what the trainer has to show."""

    def _inference(self) -> Any:
        """Inference mode; ``no_grad`` under fsdp, whose all-gather buffers, if first made
        in inference mode, cannot be written by the training steps after it."""
        import torch

        return torch.no_grad() if self.strategy is Strategy.FSDP else torch.inference_mode()


class SupervisedTrainer(Trainer):
    """Trains and evaluates a classifier or a next-token language model.

    Classification: cross-entropy over the classes, or binary cross-entropy when the model
    has one output (a sigmoid for two classes); metrics ``val_loss`` and ``val_accuracy``.
    Language model: each block of the corpus is cut into sequences of ``seq_len`` (64)
    tokens, each predicting the next; metrics ``val_loss`` (nats per token),
    ``val_perplexity`` and ``val_accuracy`` (next token). ``grad_clip`` (the global gradient
    norm) defaults to 1.0 for a language model, to none otherwise.
    """

    def __init__(
        self, model: torch.nn.Module, params: Mapping[str, Any], data: DataSplit, **kwargs: Any
    ) -> None:
        super().__init__(params, **kwargs)
        self.model = self._ddp(model.to(self.device))
        self.language_model = data.task == "language_model"
        self.grad_clip = params.get("grad_clip", 1.0 if self.language_model else None)
        self.seq_len = int(params.get("seq_len", 64))
        self.optimizer = make_optimizer(self.model.parameters(), params)
        self._arrays = self._prepare(data)

    def _prepare(self, data: DataSplit) -> tuple[torch.Tensor, ...]:
        if not self.language_model:
            assert data.y_train is not None and data.y_val is not None
            return data.x_train, data.y_train, data.x_val, data.y_val
        return (*self._windows(data.x_train), *self._windows(data.x_val))

    def _windows(self, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets: each block cut into ``seq_len`` pieces."""
        length = blocks.shape[1] - 1
        if not 1 <= self.seq_len <= length:
            raise ValueError(
                f"seq_len must be between 1 and {length} (the corpus blocks' length - 1), "
                f"got {self.seq_len}"
            )
        n = length // self.seq_len
        used = n * self.seq_len
        x = blocks[:, :used].reshape(-1, self.seq_len)
        y = blocks[:, 1 : used + 1].reshape(-1, self.seq_len)
        return x, y

    def _loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        import torch.nn.functional as F

        out = out.float()
        if self.language_model:
            return F.cross_entropy(
                out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction=reduction
            )
        if out.shape[-1] == 1:
            return F.binary_cross_entropy_with_logits(
                out.squeeze(-1), y.float(), reduction=reduction
            )
        return F.cross_entropy(out, y, reduction=reduction)

    def _correct(self, out: Any, y: Any) -> Any:
        if out.shape[-1] == 1 and not self.language_model:
            return ((out.squeeze(-1) > 0).long() == y).sum()
        return (out.argmax(dim=-1) == y).sum()

    def train_epoch(self, data: DataSplit, epoch: int) -> dict[str, float]:
        """One pass over this rank's shard; returns mean loss, samples and samples/s."""
        import torch

        self.model.train()
        self._seed_epoch(epoch)
        x_all, y_all = self._arrays[0], self._arrays[1]
        total = torch.zeros((), dtype=torch.float64, device=self.device)  # no sync per step
        n_seen = 0
        start = time.perf_counter()
        for idx in self._batches(x_all.shape[0], epoch):
            x = x_all[idx].to(self.device, non_blocking=True)
            y = y_all[idx].to(self.device, non_blocking=True)
            self.optimizer.zero_grad(set_to_none=True)
            with autocast(self.precision, self.device):
                loss = self._loss(self.model(x), y)
            self._step(loss, self.optimizer, self.model.parameters(), self.grad_clip)
            self._update_scaler()
            total += loss.detach().double() * idx.shape[0]
            n_seen += int(idx.shape[0])
        seconds = time.perf_counter() - start
        loss_sum, n_all = self._sum(float(total), float(n_seen))
        return {
            "train_loss": loss_sum / max(n_all, 1.0),
            "samples": n_all,
            "samples_per_s": n_all / seconds if seconds > 0 else 0.0,
        }

    def evaluate(self, data: DataSplit) -> dict[str, float]:
        """Validation loss and accuracy over the whole validation split (each rank its share)."""
        self.model.eval()
        model = getattr(self.model, "module", self.model)  # no DDP sync for evaluation
        x_all = self._arrays[2][self.rank :: self.world_size]
        y_all = self._arrays[3][self.rank :: self.world_size]
        loss_sum = correct = 0.0
        with self._inference(), autocast(self.precision, self.device):
            for piece in self._eval_chunks(x_all.shape[0], self._arrays[3].shape[0]):
                x = x_all[piece].to(self.device)
                y = y_all[piece].to(self.device)
                out = model(x).float()
                loss_sum += float(self._loss(out, y, reduction="sum"))
                correct += float(self._correct(out, y))
        loss_sum, n_correct, n = self._sum(loss_sum, correct, float(y_all.numel()))
        metrics = {"val_loss": loss_sum / n, "val_accuracy": n_correct / n}
        if self.language_model:
            metrics["val_perplexity"] = math.exp(min(metrics["val_loss"], 50.0))
        return metrics

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


def resolve_trainer(ref: type[Trainer] | str) -> type[Trainer]:
    """A trainer class, given as itself or as ``"module:Class"``."""
    if not isinstance(ref, str):
        return ref
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"a trainer is a class or 'module:Class', got {ref!r}")
    cls: type[Trainer] = getattr(importlib.import_module(module), name)
    return cls
