"""Mixed precision with one code path: a precision string in, an autocast context and a
scaler out."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def resolve_precision(requested: str, device: torch.device) -> str:
    """Turn ``auto`` into the precision this device trains best in.

    ``auto`` is bf16 on CUDA devices that support it (Ampere and newer), fp16 with a grad
    scaler on older CUDA devices, and fp32 on CPU (CPU autocast gave no speed-up here and
    breaks oneDNN's LSTM). An explicit precision is kept as asked.

    Example:
        >>> import torch
        >>> resolve_precision("auto", torch.device("cpu"))
        'fp32'
        >>> resolve_precision("bf16", torch.device("cpu"))
        'bf16'
    """
    import torch

    requested = str(getattr(requested, "value", requested))
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for bf16/fp16, a no-op context for fp32."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, _DTYPES[precision]))


class _NoScaler:
    """Stands in for a grad scaler when none is needed (fp32, bf16)."""

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def update(self) -> None:
        pass

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def grad_scaler(precision: str, device: torch.device) -> Any:
    """A real ``torch.amp.GradScaler`` for fp16, a no-op scaler otherwise."""
    import torch

    if precision == "fp16":
        return torch.amp.GradScaler(device.type)
    return _NoScaler()


def is_oom(exc: BaseException) -> bool:
    """Whether an exception means the device (or host) ran out of memory.

    Example:
        >>> is_oom(MemoryError())
        True
        >>> is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
        True
        >>> is_oom(ValueError("bad"))
        False
    """
    import sys

    from hpsearch.exceptions import TrialOutOfMemory

    if isinstance(exc, (MemoryError, TrialOutOfMemory)):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text.lower() or "DefaultCPUAllocator: can't allocate memory" in text
    )


def describe_device(device: torch.device) -> tuple[str, int]:
    """The device's name and memory in MiB (host memory for the CPU)."""
    import platform

    import torch

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.name, int(props.total_memory // (1024 * 1024))
    import psutil

    return platform.processor() or platform.machine(), int(
        psutil.virtual_memory().total // (1024 * 1024)
    )
