"""The trial an objective holds on a worker: reports and prune decisions reach the study
(through one ordered background writer) and the trial's MLflow run; under data parallelism
every rank sees the same suggestions and decisions, made on rank 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import optuna

from hpsearch.exceptions import TrialDiverged
from hpsearch.pruning import explain_prune

if TYPE_CHECKING:
    from hpsearch.tracking import TrialRun


class TrackedTrial(optuna.Trial):
    """An :class:`optuna.Trial` whose reports and prune decisions also land in MLflow.

    A step that an earlier attempt of the trial already reported is skipped (no duplicate
    in Optuna or in MLflow), and a non-finite value is never reported: it raises
    :class:`~hpsearch.exceptions.TrialDiverged` instead, so the pruner never sees a NaN.
    """

    def __init__(
        self, study: optuna.Study, trial_id: int, *, run: TrialRun, metric: str, pruner_name: str
    ) -> None:
        super().__init__(study, trial_id)
        self._run = run
        self._metric = metric
        self._pruner_name = pruner_name
        self.last_step: int | None = max(
            self._cached_frozen_trial.intermediate_values, default=None
        )
        self.prune_decision: dict[str, Any] | None = None
        self._reports: list[Future[None]] = []
        for step, value in sorted(self._cached_frozen_trial.intermediate_values.items()):
            # Reports of an earlier attempt: MLflow gets them again in case that attempt's
            # write was lost with its worker (the run skips the steps it already holds).
            if math.isfinite(value):
                run.log_metrics({metric: value}, step)

    def already_reported(self, step: int) -> bool:
        """Whether ``step`` was reported (by this attempt or an earlier one)."""
        return int(step) in self._cached_frozen_trial.intermediate_values

    def report(self, value: float, step: int) -> None:
        """Report like :meth:`optuna.Trial.report`, with the storage write off the training loop.

        The value is in this trial's view at once (``should_prune`` sees it); the write to
        the study goes through one ordered background thread, and :meth:`flush_reports`
        (called before the trial's result is returned) waits for it.
        """
        value = float(value)
        step = int(step)
        if step < 0:
            raise ValueError(f"`{step=}` must be non-negative.")
        if not math.isfinite(value):
            raise TrialDiverged(f"{self._metric} is {value} at step {step}", step=step, value=value)
        if step in self._cached_frozen_trial.intermediate_values:
            return  # reported by an earlier attempt: the study keeps that value
        self._cached_frozen_trial.intermediate_values[step] = value
        self._reports.append(
            _report_writer().submit(
                self.storage.set_trial_intermediate_value, self._trial_id, step, value
            )
        )
        self.last_step = step
        self._run.log_metrics({self._metric: value}, step)

    def flush_reports(self) -> None:
        """Wait until every report is in the study; raise if one could not be written."""
        pending, self._reports = self._reports, []
        for future in pending:
            future.result()

    def should_prune(self) -> bool:
        decision = super().should_prune()
        if decision and self.last_step is not None:
            value = self._cached_frozen_trial.intermediate_values[self.last_step]
            reason = explain_prune(
                self.study,
                self._cached_frozen_trial,
                self.last_step,
                value,
                pruner_name=self._pruner_name,
                metric=self._metric,
            )
            self.prune_decision = {"step": self.last_step, "value": value, "reason": reason}
        return decision


def _report_writer() -> ThreadPoolExecutor:
    """One thread per process sends reports to the study, in order."""
    from hpsearch._threads import ordered_executor

    return ordered_executor("hpsearch-report")


class DistributedTrial:
    """The trial as every rank of a data-parallel trial sees it.

    Rank 0 holds the real (tracked) trial; the others hold none. Suggestions and prune
    decisions are made on rank 0 and broadcast, so every rank trains the same parameters
    and all of them stop at the same step. Reports are made by rank 0 alone (the values
    are already averaged across ranks).
    """

    def __init__(self, inner: TrackedTrial | None, *, number: int) -> None:
        self._inner = inner
        self.number = number
        self._params: dict[str, Any] = {}

    @staticmethod
    def _bcast(value: Any) -> Any:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _suggest(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
        value = (
            getattr(self._inner, f"suggest_{kind}")(name, *args, **kwargs)
            if self._inner is not None
            else None
        )
        value = self._bcast(value)
        self._params[name] = value
        return value

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float:
        return self._suggest("float", name, low, high, **kwargs)

    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int:
        return self._suggest("int", name, low, high, **kwargs)

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._suggest("categorical", name, choices)

    @property
    def params(self) -> dict[str, Any]:
        return self._inner.params if self._inner is not None else dict(self._params)

    def report(self, value: float, step: int) -> None:
        if self._inner is not None:
            self._inner.report(value, step)
        elif not math.isfinite(float(value)):
            raise TrialDiverged(f"value is {value} at step {step}", step=step, value=value)

    def should_prune(self) -> bool:
        return bool(self._bcast(self._inner.should_prune() if self._inner is not None else None))

    def already_reported(self, step: int) -> bool:
        return self._inner.already_reported(step) if self._inner is not None else False

    def set_user_attr(self, key: str, value: Any) -> None:
        if self._inner is not None:
            self._inner.set_user_attr(key, value)
