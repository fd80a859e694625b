"""What a built-in trial holds in memory per rank, logged and (with a cap) enforced.

Per epoch, rank 0 logs every rank's numbers (gathered from all ranks):

- ``param_bytes_rank<r>``: the bytes of the parameters rank r holds (its local shards under
  fsdp, the whole model under ddp); ``param_bytes_per_rank``: the largest of them.
- ``train_state_bytes_rank<r>``: parameters + gradients + optimizer state on rank r, counted
  after the first optimizer step (when Adam's moments exist); ``train_state_bytes_per_rank``:
  the largest.
- CUDA: ``cuda_max_allocated_bytes_rank<r>`` (``torch.cuda.max_memory_allocated``, reset at
  the trial's start). CPU: ``peak_rss_bytes_rank<r>``, the rank process's peak resident set
  (Linux ``VmHWM``, reset at the trial's start through ``/proc/self/clear_refs``; where that
  cannot be reset, the process's lifetime peak from ``getrusage``). The whole process is
  counted (Python, torch, the data set), not only the model.

``objective.max_memory_per_device`` is enforced on CUDA by the caching allocator
(``torch.cuda.set_per_process_memory_fraction``, undone at the trial's end: ranks are warm
and run other trials next), and on CPU by hpsearch: after the first optimizer step every
rank's parameter + gradient + optimizer-state bytes are gathered, and if one rank's are over
the cap, every rank raises :class:`~hpsearch.exceptions.TrialOutOfMemory`.

A trial packed with others on one device (``gpus_per_trial`` 1/2, 1/4, 1/8) has that fraction
of it: on CUDA its allocator is capped at the fraction of the device's memory (of
``max_memory_per_device``, where that is set), for built-in models and user objectives alike
(:func:`device_share`); on CPU slots a built-in trial's cap is that fraction of
``max_memory_per_device``. Over it, the trial fails alone: its neighbours are other processes.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import TrialOutOfMemory
from hpsearch.spec import Strategy
from hpsearch.training._fsdp import grad_bytes, optimizer_state_bytes, param_bytes

if TYPE_CHECKING:
    import torch

    from hpsearch.training._loop import Trainer


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def _modules_and_optimizers(trainer: Trainer) -> tuple[list[Any], list[Any]]:
    import torch

    modules = [v for v in vars(trainer).values() if isinstance(v, torch.nn.Module)]
    optimizers = [v for v in vars(trainer).values() if isinstance(v, torch.optim.Optimizer)]
    return modules, optimizers


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak resident set size (VmHWM) to the current one
        return True
    except OSError:
        return False


def _peak_rss() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _gather(value: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, value)
    return out


@contextlib.contextmanager
def device_share(device: str, share: float) -> Iterator[None]:
    """Cap this process's CUDA allocator at ``share`` of ``device`` while the block runs (a
    trial packed with others on it); nothing on CPU or for a whole device."""
    if share >= 1 or not device.startswith("cuda"):
        yield
        return
    import torch

    torch.cuda.set_per_process_memory_fraction(share, torch.device(device))
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, torch.device(device))


class MemoryMonitor:
    """Counts, gathers and caps one trial's memory per rank (a context manager: the CUDA cap
    is undone on exit)."""

    def __init__(
        self,
        trainer: Trainer,
        *,
        device: torch.device,
        rank: int,
        world_size: int,
        cap: int | None,
        strategy: Strategy | str,
        share: float = 1.0,
    ) -> None:
        self.trainer = trainer
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.share = min(1.0, share)  # of the device, where trials are packed on it
        self.cap = None if cap is None else int(cap * self.share)
        self.strategy = Strategy(strategy)
        self.state_bytes: list[int] | None = None  # per rank, after the first step
        self._hooks: list[Any] = []

    def __enter__(self) -> MemoryMonitor:
        import torch

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.cap is not None or self.share < 1:
                total = torch.cuda.get_device_properties(self.device).total_memory
                fraction = self.share if self.cap is None else min(1.0, self.cap / total)
                torch.cuda.set_per_process_memory_fraction(fraction, self.device)
        else:
            _reset_peak_rss()
        _, optimizers = _modules_and_optimizers(self.trainer)
        for opt in optimizers:
            self._hooks.append(opt.register_step_post_hook(self._after_step))
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self.device.type == "cuda" and (self.cap is not None or self.share < 1):
            import torch

            torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def _after_step(self, *_: Any) -> None:
        """After the first optimizer step (of any of the trainer's optimizers): count, gather,
        check the cap. Every rank steps at the same points, so the gather is collective."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        modules, optimizers = _modules_and_optimizers(self.trainer)
        mine = param_bytes(modules) + grad_bytes(modules) + optimizer_state_bytes(optimizers)
        self.state_bytes = [int(v) for v in _gather(mine, self.world_size)]
        if self.cap is None or self.device.type == "cuda":
            return  # on CUDA the allocator itself enforces the cap
        worst = max(range(self.world_size), key=lambda r: self.state_bytes[r])  # type: ignore[index]
        needed = self.state_bytes[worst]
        if needed > self.cap:
            raise TrialOutOfMemory(
                f"parameters + gradients + optimizer state take {_mib(needed)} on rank {worst} "
                f"of {self.world_size} ({self.strategy.value}), over "
                + (
                    f"objective.max_memory_per_device {_mib(self.cap)}"
                    if self.share == 1
                    else f"its 1/{round(1 / self.share)} of objective.max_memory_per_device "
                    f"({_mib(self.cap)}; gpus_per_trial {self.share:g})"
                )
                + (
                    "; parallel: fsdp (or pipeline, for a model that can be cut) splits them "
                    "over the set"
                    if self.strategy is Strategy.DDP and self.world_size > 1
                    else ""
                ),
                needed=needed,
                limit=self.cap,
                rank=worst,
            )

    def epoch_metrics(self) -> dict[str, float]:
        """Every rank's numbers (collective: call on every rank); rank 0 logs them."""
        import torch

        modules, _ = _modules_and_optimizers(self.trainer)
        if self.device.type == "cuda":
            peak_key, peak = (
                "cuda_max_allocated_bytes",
                torch.cuda.max_memory_allocated(self.device),
            )
        else:
            peak_key, peak = "peak_rss_bytes", _peak_rss()
        rows = _gather((param_bytes(modules), int(peak)), self.world_size)
        metrics: dict[str, float] = {}
        for r, (params, peak_r) in enumerate(rows):
            metrics[f"param_bytes_rank{r}"] = float(params)
            metrics[f"{peak_key}_rank{r}"] = float(peak_r)
        metrics["param_bytes_per_rank"] = float(max(p for p, _ in rows))
        if self.state_bytes is not None:
            for r, n in enumerate(self.state_bytes):
                metrics[f"train_state_bytes_rank{r}"] = float(n)
            metrics["train_state_bytes_per_rank"] = float(max(self.state_bytes))
        return metrics
