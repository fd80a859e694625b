"""A small decoder-only transformer: a next-character language model that can be cut into
pipeline stages.

The family trains it on a text corpus (``python-docs`` or ``{path: corpus.txt}``) with the
same trainer as the LSTM language model, and reports ``val_perplexity``. The model itself,
:class:`TransformerLM`, and :func:`hpsearch.training.train_language_model` are public, so
that an objective of your own can tune it (or any model that maps token ids ``(B, T)`` to logits
``(B, T, V)``)::

    # my_objectives.py
    from hpsearch.data import load_dataset
    from hpsearch.models import TransformerLM
    from hpsearch.training import train_language_model

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
