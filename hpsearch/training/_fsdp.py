"""Fully sharded data parallelism (``objective.parallel: fsdp``) with FSDP2.

A trial's model is sharded with :func:`torch.distributed.fsdp.fully_shard` over a 1-D device
mesh of the trial's ranks: first every submodule that owns parameters (a conv, linear,
embedding or recurrent layer: one unit each, all-gathered only while it computes), then the
root. Each rank then keeps ``1/k`` of every parameter (``Shard(0)`` DTensors), of its
gradient and of the optimizer state built on it. Mixed precision is FSDP's own
:class:`~torch.distributed.fsdp.MixedPrecisionPolicy`: bf16 or fp16 parameters in compute
and gradient reduction, fp32 shards and optimizer state (fp32: no policy).

On CPU the mesh is of type ``"cpu"`` over the trial's gloo process group; gloo has every
collective FSDP2 needs (all-gather, reduce-scatter), in fp32, bf16 and fp16.

Checkpoints are sharded (:class:`ShardedCheckpointStore`): every rank writes its own shards
with :mod:`torch.distributed.checkpoint` (DCP), model and optimizer through
:func:`~torch.distributed.checkpoint.state_dict.get_state_dict`. A checkpoint is written to
a temporary folder, completed by a marker file, and only then renamed into place, so a
killed worker never leaves one that loads half. DCP reshards on load, so a trial resumes on
a set of any size (a lone rank too, with no process group).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy


log = logging.getLogger(__name__)


class _Trained(Protocol):
    """What a sharded checkpoint keeps of a trainer besides its model and optimizer (a
    :class:`~hpsearch.training.Trainer`; named by what is used, so that the epoch loop, which
    shards, and this module do not import each other)."""

    scaler: Any
    skipped_steps: int


_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}

#: The file that completes a sharded checkpoint; a folder without it is never loaded.
MARKER = "COMPLETE.json"
META = "meta.pt"


def mixed_precision_policy(precision: str) -> MixedPrecisionPolicy | None:
    """FSDP's policy for a trial's precision: parameters and gradient reduction in bf16 or
    fp16 (the fp32 shards and optimizer state stay fp32); ``None`` for fp32."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision not in _DTYPES:
        return None
    dtype = getattr(torch, _DTYPES[precision])
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)


def shard(
    module: torch.nn.Module, *, precision: str, world_size: int, device: torch.device
) -> torch.nn.Module:
    """Shard ``module`` (already on ``device``) over the ``world_size`` ranks of the default
    process group: each parameter-owning submodule, then the root. Alone, the module is
    returned as it is."""
    if world_size == 1:
        return module
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    options: dict[str, Any] = {"mesh": mesh}
    policy = mixed_precision_policy(precision)
    if policy is not None:
        options["mp_policy"] = policy
    # modules() is pre-order: reversed, every module comes after all of its descendants.
    for sub in reversed(list(module.modules())[1:]):
        if next(sub.parameters(recurse=False), None) is not None:
            fully_shard(sub, **options)
    fully_shard(module, **options)
    return module


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # a DTensor: this rank's shard
    return to_local() if to_local is not None else tensor


def local_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the tensors as this rank holds them (a DTensor's local shard)."""
    import torch

    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            local = _local(t)
            total += local.numel() * local.element_size()
    return total


def param_bytes(modules: Iterable[torch.nn.Module]) -> int:
    """Bytes of the parameters this rank holds (each counted once)."""
    seen: dict[int, Any] = {}
    for m in modules:
        for p in m.parameters():
            seen.setdefault(id(p), p)
    return local_bytes(seen.values())


def grad_bytes(modules: Iterable[torch.nn.Module]) -> int:
    seen: dict[int, Any] = {}
    for m in modules:
        for p in m.parameters():
            if p.grad is not None:
                seen.setdefault(id(p), p.grad)
    return local_bytes(seen.values())


def optimizer_state_bytes(optimizers: Iterable[torch.optim.Optimizer]) -> int:
    """Bytes of the optimizers' state tensors (Adam's moments, momentum buffers) on this rank."""
    return local_bytes(
        value for opt in optimizers for state in opt.state.values() for value in state.values()
    )


def _bcast(value: Any, world_size: int) -> Any:
    """Rank 0's ``value`` on every rank."""
    import torch.distributed as dist

    if world_size == 1 or not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ShardedCheckpointStore:
    """Sharded checkpoints of one fsdp trial: ``DIR/trial-N.dcp/`` (latest) and
    ``DIR/trial-N.prev.dcp/`` (the one before), each a DCP folder plus ``meta.pt`` (epoch,
    value, metrics, grad scaler) and the marker ``COMPLETE.json`` (world size, epoch and the
    SHA-256 of ``meta.pt``), written last.

    Every rank of the trial holds one and calls :meth:`due`, :meth:`save` and
    :meth:`load_into` at the same points (they are collective); rank 0 alone writes the
    marker, renames and deletes. Saving is synchronous: DCP's save is itself a collective.
    """

    def __init__(
        self, directory: str | os.PathLike[str], trial_number: int, *, rank: int, world_size: int
    ) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.world_size = world_size
        self.latest = self.directory / f"trial-{trial_number}.dcp"
        self.previous = self.directory / f"trial-{trial_number}.prev.dcp"
        self._tmp_prefix = f".trial-{trial_number}.dcp."
        if rank == 0:
            # Half-written checkpoints of a lost attempt. Removed before this attempt's first
            # collective, so no other rank can be writing into one of them yet.
            self._remove_temporaries()

    def _remove_temporaries(self) -> None:
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            if path.name.startswith(self._tmp_prefix):
                shutil.rmtree(path, ignore_errors=True)

    def due(self, wanted: bool) -> bool:
        """Rank 0's decision to checkpoint now, on every rank (their clocks differ)."""
        return bool(_bcast(bool(wanted), self.world_size))

    def wait(self) -> None:
        """Nothing is written in the background (kept for the interface of CheckpointStore)."""

    @staticmethod
    def _model_and_optimizer(trainer: _Trained) -> tuple[Any, Any]:
        model, optimizer = getattr(trainer, "model", None), getattr(trainer, "optimizer", None)
        if model is None or optimizer is None:
            raise TypeError(
                f"{type(trainer).__name__} has no single model and optimizer to checkpoint "
                "sharded (fsdp supports the cnn, rnn, lstm and transformer families)"
            )
        return model, optimizer

    def save(self, state: dict[str, Any], trainer: _Trained) -> None:
        """Write this rank's shards of the trainer's model and optimizer, and (rank 0) the
        rest of ``state`` (epoch, value, metrics; the trainer's scaler and skipped steps)."""
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = self._model_and_optimizer(trainer)
        model_state, optim_state = get_state_dict(model, optimizer)
        tmp = self.directory / f"{self._tmp_prefix}{int(state['epoch'])}.tmp"
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp))
        if self.rank != 0:
            return
        # DCP's save returns on rank 0 once every rank has written its files and rank 0 the
        # metadata; what is left is rank 0's.
        extra = {k: v for k, v in state.items() if k != "trainer"}
        kept = dict(state.get("trainer") or {})
        extra["trainer"] = {k: kept[k] for k in ("scaler", "skipped_steps") if k in kept}
        buf = io.BytesIO()
        torch.save(extra, buf)
        data = buf.getvalue()
        _write_synced(tmp / META, data)
        marker = {
            "world_size": self.world_size,
            "epoch": int(state["epoch"]),
            "meta_sha256": hashlib.sha256(data).hexdigest(),
        }
        _write_synced(tmp / MARKER, json.dumps(marker).encode())
        if self.latest.exists():
            shutil.rmtree(self.previous, ignore_errors=True)
            os.replace(self.latest, self.previous)
        os.replace(tmp, self.latest)
        _fsync_dir(self.directory)

    def _verified(self, path: Path) -> dict[str, Any] | None:
        """``meta.pt`` of a complete checkpoint folder, or ``None``."""
        import torch

        try:
            marker = json.loads((path / MARKER).read_text())
            data = (path / META).read_bytes()
        except (OSError, ValueError):
            return None
        if (
            hashlib.sha256(data).hexdigest() != marker.get("meta_sha256")
            or not (path / ".metadata").is_file()
        ):
            log.warning("ignoring incomplete sharded checkpoint %s", path)
            return None
        try:
            meta: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=False)
        except Exception as exc:
            log.warning("ignoring unreadable sharded checkpoint %s: %s", path, exc)
            return None
        meta["written_by_world_size"] = int(marker.get("world_size", 0))
        return meta

    def load_into(self, trainer: _Trained, *, resumed: bool) -> dict[str, Any] | None:
        """Load the newest complete checkpoint into ``trainer`` (model, optimizer, scaler) on
        every rank; return its epoch, value and metrics, or ``None`` (rank 0 decides whether
        the trial resumes and from which folder)."""
        found = None
        if self.rank == 0 and resumed:
            for path in (self.latest, self.previous):
                if self._verified(path) is not None:
                    found = str(path)
                    break
        found = _bcast(found, self.world_size)
        if found is None:
            return None
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        meta = self._verified(Path(found))
        if meta is None:  # gone between rank 0's look and this one's: a bug, not a fault
            raise RuntimeError(f"sharded checkpoint {found} vanished while it was loaded")
        model, optimizer = self._model_and_optimizer(trainer)
        model_state, optim_state = get_state_dict(model, optimizer)
        # DCP loads in place, each rank reading the pieces of its own shards: the checkpoint
        # may come from a set of another size.
        dcp.load({"model": model_state, "optim": optim_state}, checkpoint_id=found)
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
        kept = meta.pop("trainer", {})
        if "scaler" in kept:
            trainer.scaler.load_state_dict(kept["scaler"])
        trainer.skipped_steps = int(kept.get("skipped_steps", 0))
        return meta

    def delete(self) -> None:
        if self.rank != 0:
            return
        for path in (self.latest, self.previous):
            shutil.rmtree(path, ignore_errors=True)
        self._remove_temporaries()


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
