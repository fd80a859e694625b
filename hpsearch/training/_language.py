"""Training a language model of your own objective's making: the built-in trainer's loop,
with the trial's reports and pruning (see :class:`hpsearch.models.TransformerLM`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    import torch

    from hpsearch.data import DataSplit


def train_language_model(
    model: torch.nn.Module,
    data: DataSplit,
    trial: optuna.Trial | None = None,
    *,
    epochs: int = 3,
    params: Mapping[str, Any] | None = None,
    precision: str = "fp32",
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """Train a next-token language model on a corpus; return its last ``val_perplexity``.

    ``model`` maps token ids ``(B, T)`` to logits ``(B, T, V)`` (a
    :class:`~hpsearch.models.TransformerLM`, or your own). ``data`` is a language-model
    split (:func:`hpsearch.data.load_dataset` of ``python-docs`` or
    ``{"path": "corpus.txt"}``). ``params`` are the trainer's: ``lr``
    (1e-3), ``optimizer`` (adam), ``weight_decay``, ``batch_size`` (64), ``seq_len`` (64),
    ``grad_clip`` (1.0). With a ``trial``, each epoch's perplexity is reported at its epoch
    number and the trial is pruned (:class:`optuna.TrialPruned`) when the pruner says so.

    Example:
        >>> from hpsearch.data import load_dataset
        >>> from hpsearch.models import TransformerLM
        >>> from hpsearch.training import train_language_model
        >>> data = load_dataset({"name": "python-docs", "max_chars": 20_000}, seed=0)
        >>> model = TransformerLM(data.info["vocab_size"], width=32, depth=1, max_len=32)
        >>> ppl = train_language_model(model, data, epochs=1, params={"lr": 3e-3, "seq_len": 32})
        >>> 1.0 < ppl < data.info["vocab_size"]
        True
    """
    import optuna
    import torch

    from hpsearch.training._loop import SupervisedTrainer

    if data.task != "language_model":
        raise ValueError(f"{data.name!r} is not a text corpus (task {data.task!r})")
    trainer = SupervisedTrainer(
        model, dict(params or {}), data, device=torch.device(device), precision=precision, seed=seed
    )
    value = float("nan")
    for epoch in range(1, epochs + 1):
        trainer.train_epoch(data, epoch)
        value = trainer.evaluate(data)["val_perplexity"]
        if trial is not None:
            trial.report(value, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {epoch}")
    return value
