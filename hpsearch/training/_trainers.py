"""The one place that picks a trial's trainer: the family's own, or the pipeline trainer
for a pipeline layout (which builds on the family's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpsearch.spec import Strategy
from hpsearch.training._loop import resolve_trainer

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit
    from hpsearch.models import ModelFamily
    from hpsearch.training._loop import Trainer


def make_trainer(
    family: ModelFamily,
    model: torch.nn.Module,
    params: Mapping[str, Any],
    data: DataSplit,
    **kwargs: Any,
) -> Trainer:
    """The trainer ``family`` names (:attr:`~hpsearch.models._base.ModelFamily.trainer`) for
    ``model`` on ``data``; with ``parallel`` (the trial's layout) ``pipeline``, the pipeline
    trainer."""
    parallel = kwargs.pop("parallel", None)
    if parallel is not None and parallel.strategy is Strategy.PIPELINE:
        from hpsearch.training._pipeline import make_pipeline_trainer

        kwargs.pop("strategy", None)
        return make_pipeline_trainer(family, model, params, data, parallel=parallel, **kwargs)
    if parallel is not None:
        kwargs.setdefault("strategy", parallel.strategy)
    trainer: Any = resolve_trainer(family.trainer)
    return trainer(model, params, data, **kwargs)
