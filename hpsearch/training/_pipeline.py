"""Pipeline-parallel trials: the model cut into stages, one stage per rank.

With k ranks and s stages a trial trains k / s pipelines data-parallel. Rank r holds stage
``r % s`` of pipeline ``r // s``; the stages of a pipeline talk point to point in their
own process group (``torch.distributed.pipelining``: :class:`PipelineStage` with
:class:`ScheduleGPipe` or :class:`Schedule1F1B`), and the ranks that hold the same stage in
different pipelines average that stage's gradients in theirs. Every rank takes the same
steps as one rank training the whole model on the same global batch (up to floating point
and dropout):

* the global batch (``batch_size``; with ``per_rank_batch`` it is per pipeline, and
  ``lr_scaling: linear`` scales by the number of pipelines) is shared among them; each pipeline's
  share is cut into ``microbatches`` (which must divide it); a last, short batch is
  trimmed to a multiple of pipelines x micro-batches;
* the loss is the mean per micro-batch, the schedule divides the gradients by the number
  of micro-batches, and the all-reduce across pipelines by their number: the gradient of
  the global batch's mean loss;
* gradient clipping uses the norm over every stage (summed across the pipeline's ranks).

The last stage computes the loss and the validation metrics; they are summed over the
whole world (the other ranks add zeros), so every rank returns the same metrics and rank 0
reports them. Checkpoints hold every stage's state (gathered on rank 0) and resume only
with the same number of stages.

Measured facts of torch 2.13 this relies on (read in ``torch/distributed/pipelining``):
a stage's receive buffers are shaped by its first step (metadata inference), so each
batch shape gets its own stage and schedule here; the inference's backward uses
``torch.autograd.grad`` and leaves parameter gradients alone; 1F1B needs at least as many
micro-batches as stages.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpsearch.training._amp import autocast
from hpsearch.training._loop import (
    EVAL_CHUNK,
    SupervisedTrainer,
    Trainer,
    make_optimizer,
    resolve_trainer,
)

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit
    from hpsearch.models import ModelFamily
    from hpsearch.spec import ParallelSpec


def can_cut(family: ModelFamily) -> bool:
    """Whether ``family`` can be cut into pipeline stages (it has ``stages(model, n)``)."""
    return callable(getattr(family, "stages", None))


def make_pipeline_trainer(
    family: ModelFamily,
    model: torch.nn.Module,
    params: Mapping[str, Any],
    data: DataSplit,
    *,
    parallel: ParallelSpec,
    world_size: int = 1,
    **kwargs: Any,
) -> Trainer:
    """The trainer of a pipeline trial; a one-stage pipeline is plain (data-parallel)
    training."""
    stages = int(parallel.stages or world_size)
    if not can_cut(family):
        raise ValueError(
            f"model {family.name!r} cannot be cut into pipeline stages "
            "(objective.parallel.strategy: pipeline needs a model that can: transformer)"
        )
    if stages == 1:
        trainer: Any = resolve_trainer(family.trainer)
        return trainer(model, params, data, world_size=world_size, **kwargs)
    if world_size % stages:
        raise ValueError(f"{stages} stages do not divide the trial's {world_size} devices")
    return PipelineTrainer(
        family, model, params, data, parallel=parallel, world_size=world_size, **kwargs
    )


class PipelineTrainer(SupervisedTrainer):
    """A next-token language model trained as ``world_size / stages`` pipelines."""

    #: :meth:`state_dict` is a collective: every rank must call it (rank 0 gets the state).
    collective_state = True

    def __init__(
        self,
        family: ModelFamily,
        model: torch.nn.Module,
        params: Mapping[str, Any],
        data: DataSplit,
        *,
        parallel: ParallelSpec,
        **kwargs: Any,
    ) -> None:
        import torch.distributed as dist

        Trainer.__init__(self, params, **kwargs)
        if self.precision == "fp16":
            raise ValueError(
                "a pipeline trial trains in fp32 or bf16 (fp16's grad scaler is not "
                "shared across stages); set objective.precision"
            )
        if data.task != "language_model":
            raise ValueError("pipeline trials train language models (a text corpus)")
        self.language_model = True
        self.grad_clip = params.get("grad_clip", 1.0)
        self.seq_len = int(params.get("seq_len", 64))
        self.n_stages = int(parallel.stages or self.world_size)
        self.n_pipes = self.world_size // self.n_stages
        self.microbatches = int(parallel.microbatches)
        if params.get("per_rank_batch"):  # per pipeline: the model's copies are the pipelines
            self.batch_size = int(params.get("batch_size", 64)) * self.n_pipes
        self.schedule_name = parallel.schedule.value
        if self.schedule_name == "1f1b" and self.microbatches < self.n_stages:
            raise ValueError(
                f"the 1f1b schedule needs at least as many micro-batches as stages "
                f"({self.microbatches} < {self.n_stages})"
            )
        per_pipe = self.batch_size // self.n_pipes
        if self.batch_size % self.n_pipes or per_pipe % self.microbatches:
            raise ValueError(
                f"objective.parallel.microbatches ({self.microbatches}) must divide the batch "
                f"of each of the {self.n_pipes} pipelines ({self.batch_size} / {self.n_pipes})"
            )
        self.stage = self.rank % self.n_stages
        self.pipe = self.rank // self.n_stages
        self.layout = (
            f"pipeline: {self.n_stages} stages x {self.n_pipes} pipelines, "
            f"{self.microbatches} micro-batches, {self.schedule_name}"
        )
        # Every rank creates every group, in the same order (a collective).
        s, p = self.n_stages, self.n_pipes
        for q in range(p):
            group = dist.new_group([q * s + j for j in range(s)])
            if q == self.pipe:
                self.pipe_group = group
        for j in range(s):
            group = dist.new_group([q * s + j for q in range(p)])
            if j == self.stage:
                self.dp_group = group
        self.module = family.stages(model, s)[self.stage].to(self.device)  # type: ignore[attr-defined]
        self.model = self.module
        self.optimizer = make_optimizer(self.module.parameters(), params)
        self._arrays = self._prepare(data)
        self._schedules: dict[tuple[int, bool], Any] = {}

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.n_stages - 1

    def _schedule(self, rows: int, train: bool) -> Any:
        """The stage and schedule for batches of ``rows`` (buffers are shaped on first use)."""
        key = (rows, train)
        if key not in self._schedules:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

            stage = PipelineStage(
                self.module, self.stage, self.n_stages, self.device, group=self.pipe_group
            )
            if not train:
                self._schedules[key] = ScheduleGPipe(stage, 1)
            else:
                cls = Schedule1F1B if self.schedule_name == "1f1b" else ScheduleGPipe
                self._schedules[key] = cls(stage, self.microbatches, loss_fn=self._loss)
        return self._schedules[key]

    def _pipe_batches(self, n: int, epoch: int) -> list[torch.Tensor]:
        """This pipeline's share of each global batch (trimmed to whole micro-batches)."""
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(n, generator=g)
        unit = self.n_pipes * self.microbatches
        out = []
        for i in range(0, n, self.batch_size):
            chunk = order[i : i + self.batch_size]
            used = (chunk.numel() // unit) * unit
            if used:
                out.append(chunk[:used][self.pipe :: self.n_pipes])
        return out

    def _average_and_clip(self) -> None:
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return
        if self.n_pipes > 1:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.dp_group)
            flat /= self.n_pipes
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        if self.grad_clip:
            sq = torch.stack([g.detach().double().pow(2).sum() for g in grads]).sum()
            dist.all_reduce(sq, group=self.pipe_group)  # the norm over every stage
            coef = (float(self.grad_clip) / (sq.sqrt() + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype))

    def train_epoch(self, data: DataSplit, epoch: int) -> dict[str, float]:
        import torch

        self.module.train()
        self._seed_epoch(epoch)
        x_all, y_all = self._arrays[0], self._arrays[1]
        total = 0.0
        n_seen = 0
        start = time.perf_counter()
        for idx in self._pipe_batches(x_all.shape[0], epoch):
            schedule = self._schedule(int(idx.numel()), True)
            self.optimizer.zero_grad(set_to_none=True)
            losses: list[torch.Tensor] = []
            x = x_all[idx].to(self.device) if self.is_first else None
            y = y_all[idx].to(self.device) if self.is_last else None
            with autocast(self.precision, self.device):
                args = (x,) if self.is_first else ()
                if self.is_last:
                    schedule.step(*args, target=y, losses=losses)
                else:
                    schedule.step(*args)
            self._average_and_clip()
            self.optimizer.step()
            if self.is_last:
                total += float(torch.stack(losses).detach().double().mean()) * idx.numel()
                n_seen += int(idx.numel())
        seconds = time.perf_counter() - start
        loss_sum, n_all = self._sum(total, float(n_seen))  # the last stages' sums, everywhere
        return {
            "train_loss": loss_sum / max(n_all, 1.0),
            "samples": n_all,
            "samples_per_s": n_all / seconds if seconds > 0 else 0.0,
        }

    def evaluate(self, data: DataSplit) -> dict[str, float]:
        import math

        import torch

        self.module.eval()
        x_all = self._arrays[2][self.pipe :: self.n_pipes]
        y_all = self._arrays[3][self.pipe :: self.n_pipes]
        loss_sum = correct = count = 0.0
        with torch.no_grad(), autocast(self.precision, self.device):
            for i in range(0, x_all.shape[0], EVAL_CHUNK):
                rows = min(EVAL_CHUNK, x_all.shape[0] - i)
                schedule = self._schedule(rows, False)
                args = (x_all[i : i + rows].to(self.device),) if self.is_first else ()
                out = schedule.eval(*args)
                if self.is_last:
                    y = y_all[i : i + rows].to(self.device)
                    out = out.float()
                    loss_sum += float(self._loss(out, y, reduction="sum"))
                    correct += float(self._correct(out, y))
                    count += float(y.numel())
        loss_sum, n_correct, n = self._sum(loss_sum, correct, count)
        metrics = {"val_loss": loss_sum / n, "val_accuracy": n_correct / n}
        metrics["val_perplexity"] = math.exp(min(metrics["val_loss"], 50.0))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Every stage's model and optimizer, gathered on rank 0 (a collective; the other
        ranks get ``{}``)."""
        import torch.distributed as dist

        mine = {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        if gathered is None:
            return {}
        return {
            "pipeline": {"stages": self.n_stages},
            "stages": gathered[: self.n_stages],  # pipeline 0's: the others hold the same
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = (state.get("pipeline") or {}).get("stages")
        if saved != self.n_stages:
            raise ValueError(
                f"the checkpoint is of a {saved or 1}-stage model; this trial has "
                f"{self.n_stages} stages (resume with the same layout)"
            )
        mine = state["stages"][self.stage]
        self.module.load_state_dict(mine["model"])
        self.optimizer.load_state_dict(mine["optimizer"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
