"""Training inside a trial: precision, devices, the epoch loop, checkpoints."""

from hpsearch.training._amp import autocast, grad_scaler, is_oom, resolve_precision
from hpsearch.training._checkpoint import CheckpointStore

__all__ = ["CheckpointStore", "autocast", "grad_scaler", "is_oom", "resolve_precision"]
