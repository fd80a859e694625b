"""How a built-in trial trains: precision, devices, the epoch loop, data-parallel, sharded
(fsdp) and pipelined training, memory bounds, and the built-in objective that ties a model
family, a data set and a trainer together."""

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes
from hpsearch.training._amp import autocast, grad_scaler, is_oom, resolve_precision
from hpsearch.trial import CheckpointStore

if TYPE_CHECKING:
    from hpsearch.training._fsdp import ShardedCheckpointStore, param_bytes, shard
    from hpsearch.training._gan import GANTrainer
    from hpsearch.training._language import train_language_model
    from hpsearch.training._loop import SupervisedTrainer, Trainer
    from hpsearch.training._memory import device_share
    from hpsearch.training._objective import builtin_objective
    from hpsearch.training._pipeline import PipelineTrainer
    from hpsearch.training._trainers import make_trainer

__all__ = [
    "CheckpointStore",
    "GANTrainer",
    "PipelineTrainer",
    "ShardedCheckpointStore",
    "SupervisedTrainer",
    "Trainer",
    "autocast",
    "builtin_objective",
    "device_share",
    "grad_scaler",
    "is_oom",
    "make_trainer",
    "param_bytes",
    "resolve_precision",
    "shard",
    "train_language_model",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._fsdp": (
            "ShardedCheckpointStore",
            "param_bytes",
            "shard",
        ),
        "._loop": (
            "SupervisedTrainer",
            "Trainer",
        ),
        "._gan": ("GANTrainer",),
        "._language": ("train_language_model",),
        "._pipeline": ("PipelineTrainer",),
        "._memory": ("device_share",),
        "._objective": ("builtin_objective",),
        "._trainers": ("make_trainer",),
    },
)
