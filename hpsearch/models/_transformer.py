"""A small decoder-only transformer: a next-character language model that can be cut into
pipeline stages.

The family trains it on a text corpus (``python-docs`` or ``{path: corpus.txt}``) with the
same trainer as the LSTM language model, and reports ``val_perplexity``. The model itself,
:class:`TransformerLM`, and :func:`train_language_model` are public, so that an objective
of your own can tune it (or any model that maps token ids ``(B, T)`` to logits
``(B, T, V)``)::

    # my_objectives.py
    from hpsearch.data import load_dataset
    from hpsearch.models import TransformerLM, train_language_model

    def objective(trial):
        data = load_dataset({"name": "python-docs", "max_chars": 100_000}, seed=0)
        model = TransformerLM(
            data.info["vocab_size"],
            width=trial.suggest_categorical("width", [32, 64, 128]),
            depth=trial.suggest_int("depth", 1, 4),
            heads=4,
            dropout=trial.suggest_float("dropout", 0.0, 0.3),
        )
        lr = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
        return train_language_model(model, data, trial, epochs=5, params={"lr": lr})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from hpsearch.models._base import ModelFamily

if TYPE_CHECKING:
    import optuna
    import torch

    from hpsearch.data import DataSplit


class TransformerFamily(ModelFamily):
    """A decoder-only transformer language model on a text corpus.

    Embedding (token + learned position) -> ``depth`` pre-norm blocks of causal
    self-attention and a GELU MLP -> layer norm -> an untied linear head over the
    vocabulary; metrics ``val_perplexity`` (the default), ``val_loss`` (nats per token) and
    ``val_accuracy`` (of the next token).

    Hyperparameters (defaults): ``width`` (64; a multiple of ``heads``), ``depth`` (2),
    ``heads`` (4), ``dropout`` (0.1), and the trainer's ``seq_len`` (64) and ``grad_clip``
    (1.0). It can be cut into pipeline stages (``objective.parallel: pipeline``): at most
    ``depth + 1`` of them.
    """

    name = "transformer"
    defaults: ClassVar[Mapping[str, Any]] = {
        "width": 64,
        "depth": 2,
        "heads": 4,
        "dropout": 0.1,
    }

    def build(self, params: Mapping[str, Any], data: DataSplit) -> torch.nn.Module:
        if data.task != "language_model":
            raise ValueError("the transformer family trains on a text corpus (a language model)")
        from hpsearch.models._transformer_nn import TransformerLM

        model: torch.nn.Module = TransformerLM(
            int(data.info["vocab_size"]),
            width=int(self.param(params, "width")),
            depth=int(self.param(params, "depth")),
            heads=int(self.param(params, "heads")),
            dropout=float(self.param(params, "dropout")),
            max_len=int(data.x_train.shape[1]) - 1,
        )
        return model

    def stages(self, model: torch.nn.Module, n: int) -> list[torch.nn.Module]:
        """The model cut into ``n`` pipeline stages (see :meth:`TransformerLM.stages`)."""
        out: list[torch.nn.Module] = model.stages(n)  # type: ignore[operator]
        return out


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

    ``model`` maps token ids ``(B, T)`` to logits ``(B, T, V)`` (a :class:`TransformerLM`,
    or your own). ``data`` is a language-model split (:func:`hpsearch.data.load_dataset` of
    ``python-docs`` or ``{"path": "corpus.txt"}``). ``params`` are the trainer's: ``lr``
    (1e-3), ``optimizer`` (adam), ``weight_decay``, ``batch_size`` (64), ``seq_len`` (64),
    ``grad_clip`` (1.0). With a ``trial``, each epoch's perplexity is reported at its epoch
    number and the trial is pruned (:class:`optuna.TrialPruned`) when the pruner says so.

    Example:
        >>> from hpsearch.data import load_dataset
        >>> from hpsearch.models import TransformerLM, train_language_model
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
