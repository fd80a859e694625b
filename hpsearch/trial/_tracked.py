"""The trial an objective holds on a worker: reports and prune decisions reach the study
(through one ordered background writer) and the trial's MLflow run; under data parallelism
every rank sees the same suggestions and decisions, made on rank 0.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import optuna

from hpsearch.exceptions import TrialDiverged
from hpsearch.search import cached_trial, explain_prune, give_relative_sample
from hpsearch.trial._faults import fault_point
from hpsearch.trial._ranges import file_space_wins
from hpsearch.trial._stop import TrialStopped

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution, CategoricalChoiceType
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

    from hpsearch.tracking import TrialRun


class TrialPaused(optuna.TrialPruned):
    """A scheduler's pause: the trial stops after ``step`` with its checkpoint written, and
    runs again from it when the scheduler says so (it is not pruned)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"paused after step {step}")
        self.step = step


def step_reported(trial: FrozenTrial, step: int, *, several: bool) -> bool:
    """Whether ``trial`` holds a report of ``step`` (``several``: a report of several
    objectives' values, a user attribute; see :mod:`hpsearch.search.pareto`)."""
    if several:
        from hpsearch.search.pareto import VALUES_ATTR

        return f"{VALUES_ATTR}{int(step)}" in trial.user_attrs
    return int(step) in trial.intermediate_values


class TrackedTrial(optuna.Trial):
    """An :class:`optuna.Trial` whose reports and prune decisions also land in MLflow.

    A step that an earlier attempt of the trial already reported is skipped (no duplicate
    in Optuna or in MLflow), and a non-finite value is never reported: it raises
    :class:`~hpsearch.exceptions.TrialDiverged` instead, so the pruner never sees a NaN.
    Reports go through Optuna's own :meth:`optuna.Trial.report`; only its storage write is
    taken off the training loop (see :class:`_QueuedReports`).

    A parameter of the study file's ``space`` reaches the trial with the file's range before
    the objective runs, and that range wins over the one the objective's own ``suggest_*``
    call gives (a range narrowed in the file, say, while the code keeps the old bounds):
    hpsearch says so once per parameter in each worker process (see
    :mod:`hpsearch.trial._ranges`), and Optuna's warning about the two ranges is kept quiet.
    """

    def __init__(
        self,
        study: optuna.Study,
        trial_id: int,
        *,
        run: TrialRun,
        metric: str,
        pruner_name: str,
        metrics: Sequence[str] | None = None,
        stop_at: int | None = None,
        relative: Mapping[str, tuple[Any, Any]] | None = None,
        study_dir: str | None = None,
        stop_on_report: bool = False,
    ) -> None:
        super().__init__(study, trial_id)
        self.study_dir = study_dir
        # The parameters the trial holds before the objective runs: the study file's space,
        # which the coordinator asked the trial with (and an earlier attempt's suggests).
        self._given = dict(cached_trial(self).distributions)
        # A user objective stops at a report when the run asks (a built-in one at an epoch's
        # end, with its checkpoint: see hpsearch.training._objective).
        self.stop_on_report = stop_on_report
        if relative:  # drawn by the coordinator (TrialTask.relative)
            give_relative_sample(self, relative)
        self.stop_at = stop_at  # a scheduler's pause: should_prune says True from this step
        self._reports = _QueuedReports(self.storage)
        self._reports.background_params.update(relative or ())
        self.storage = cast("BaseStorage", self._reports)
        self._run = run
        self._metric = metric
        self._pruner_name = pruner_name
        # Several objectives: each step's values are a user attribute (see hpsearch.search.pareto).
        self._metrics = list(metrics) if metrics is not None and len(metrics) > 1 else None
        self.prune_decision: dict[str, Any] | None = None
        self.paused_at: int | None = None
        if self._metrics is not None:
            from hpsearch.search.pareto import step_values

            reported = step_values(cached_trial(self))
            self.last_step = max(reported, default=None)
            for step, values in sorted(reported.items()):
                run.log_metrics(dict(zip(self._metrics, values, strict=False)), step)
            return
        earlier = cached_trial(self).intermediate_values
        self.last_step = max(earlier, default=None)
        for step, value in sorted(earlier.items()):
            # Reports of an earlier attempt: MLflow gets them again in case that attempt's
            # write was lost with its worker (the run skips the steps it already holds).
            if math.isfinite(value):
                run.log_metrics({metric: value}, step)

    def already_reported(self, step: int) -> bool:
        """Whether ``step`` was reported (by this attempt or an earlier one)."""
        return step_reported(cached_trial(self), step, several=self._metrics is not None)

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        from optuna.distributions import FloatDistribution

        with self._file_space_wins(name, FloatDistribution(low, high, step=step, log=log)):
            return super().suggest_float(name, low, high, step=step, log=log)

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        from optuna.distributions import IntDistribution

        with self._file_space_wins(name, IntDistribution(low, high, step=step, log=log)):
            return super().suggest_int(name, low, high, step=step, log=log)

    def _file_space_wins(self, name: str, asked: BaseDistribution) -> Any:
        """Around the suggest of ``name`` with the objective's range ``asked`` (see
        :func:`hpsearch.trial._ranges.file_space_wins`)."""
        return file_space_wins(
            self.study.study_name, self.study_dir, name, self._given.get(name), asked
        )

    def pause_reached(self) -> bool:
        """Whether an earlier attempt already reported the step this one is to pause at: it
        reached the pause, but the coordinator that sent it stopped before it heard."""
        return self.stop_at is not None and self.already_reported(self.stop_at)

    def report(self, value: float, step: int) -> None:
        """Report as :meth:`optuna.Trial.report` does, and log the value to MLflow.

        The value is in this trial's view at once (``should_prune`` sees it); its write to
        the study is queued, and :meth:`flush_reports` (called before the trial's result is
        returned) waits for it. A step reported before (by an earlier attempt) is skipped.
        When the run asks its trials to stop, a user objective's report raises
        :class:`TrialStopped` instead (the step is not reported: it trains again later).
        """
        step = int(step)
        fault_point("before_report", self.number, step, study_dir=self.study_dir)
        if self.stop_on_report:
            from hpsearch.trial._stop import stop_requested

            if stop_requested(self.study_dir):  # a yield waits for the next checkpoint
                raise TrialStopped(self.last_step)
        self._report(value, step)
        fault_point("after_report", self.number, step, study_dir=self.study_dir)

    def _report(self, value: Any, step: int) -> None:
        if self._metrics is not None:
            self._report_values(value, int(step))
            return
        value, step = float(value), int(step)
        if not math.isfinite(value):
            raise TrialDiverged(f"{self._metric} is {value} at step {step}", step=step, value=value)
        if self.already_reported(step):
            return  # the study keeps the earlier attempt's value
        super().report(value, step)
        self.last_step = step
        self._run.log_metrics({self._metric: value}, step)

    def _report_values(self, values: Any, step: int) -> None:
        """Several objectives: ``values`` (one per metric) kept as the step's user attribute,
        queued like a report, and logged to MLflow under the metrics' names."""
        from hpsearch.search.pareto import VALUES_ATTR

        assert self._metrics is not None
        if not isinstance(values, (list, tuple)) or len(values) != len(self._metrics):
            raise TypeError(
                f"this study optimizes {len(self._metrics)} metrics "
                f"({', '.join(self._metrics)}): report a tuple of that many values, "
                f"got {values!r}"
            )
        floats = [float(v) for v in values]
        for name, v in zip(self._metrics, floats, strict=True):
            if not math.isfinite(v):
                raise TrialDiverged(f"{name} is {v} at step {step}", step=step, value=v)
        if self.already_reported(step):
            return
        key = f"{VALUES_ATTR}{step}"
        self._reports.queue_user_attr(self._trial_id, key, floats)
        cached_trial(self).user_attrs[key] = floats
        self.last_step = step
        self._run.log_metrics(dict(zip(self._metrics, floats, strict=True)), step)

    def flush_reports(self) -> None:
        """Wait until every report is in the study; raise if one could not be written."""
        self._reports.flush()

    def queue_user_attr(self, key: str, value: Any) -> None:
        """Set a user attribute as a report is written: queued, in order, waited for by
        :meth:`flush_reports`."""
        self._reports.queue_user_attr(self._trial_id, key, value)
        cached_trial(self).user_attrs[key] = value

    def should_prune(self) -> bool:
        stop, last = self.stop_at, self.last_step
        if stop is not None and last is not None and last >= stop:
            self.paused_at = last
            return True
        if self._metrics is not None:
            return self._should_prune_values()
        decision = super().should_prune()
        if decision and self.last_step is not None:
            frozen = cached_trial(self)
            value = frozen.intermediate_values[self.last_step]
            reason = explain_prune(
                self.study,
                frozen,
                self.last_step,
                value,
                pruner_name=self._pruner_name,
                metric=self._metric,
            )
            self.prune_decision = {"step": self.last_step, "value": value, "reason": reason}
        return decision

    def _should_prune_values(self) -> bool:
        """Several objectives: the pareto pruner's decision at the last reported step."""
        from hpsearch.search.pareto import ParetoPruner, step_constraints, step_values

        pruner = self.study.pruner
        if self.last_step is None or not isinstance(pruner, ParetoPruner):
            return False
        frozen = cached_trial(self)
        values = step_values(frozen)[self.last_step]
        own = step_constraints(frozen, self.last_step, pruner.constraints, pruner.metrics)
        prune, reason = pruner.should_prune(self.study, self.number, self.last_step, values, own)
        if prune:
            shown = ", ".join(f"{v:.6g}" for v in values)
            self.prune_decision = {"step": self.last_step, "value": shown, "reason": reason}
        return prune


class _QueuedReports:
    """A trial's storage, with its intermediate-value writes sent by a background thread.

    ``optuna.Trial.report`` writes each value to the storage before it returns: a round
    trip to the gRPC proxy (or the database) every epoch, on the training loop's time. This
    view of the storage queues those writes, in order, on one thread per process and
    passes every other call straight through; :meth:`flush` waits for the queue.

    A suggest's parameter write is queued too when the value is the coordinator's joint
    sample (:attr:`background_params`): Optuna checked its distribution against the
    finished trials' as the suggest took it. Any other parameter is written before the
    suggest returns, so a parameter the study refuses (another kind of distribution under
    the same name) fails the objective at that suggest, not after it trained.
    """

    def __init__(self, storage: BaseStorage) -> None:
        self._storage = storage
        self._pending: list[Future[None]] = []
        self.background_params: set[str] = set()

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: Any
    ) -> None:
        write = self._storage.set_trial_param
        args = (trial_id, param_name, param_value_internal, distribution)
        if param_name not in self.background_params:
            try:
                write(*args)
            except ValueError as exc:  # Optuna's refusal does not name the parameter
                raise ValueError(f"parameter {param_name!r}: {_refusal(exc)}") from exc
            return
        self._pending.append(_report_writer().submit(write, *args))

    def set_trial_intermediate_value(self, trial_id: int, step: int, value: float) -> None:
        self._pending.append(
            _report_writer().submit(
                self._storage.set_trial_intermediate_value, trial_id, step, value
            )
        )

    def queue_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._pending.append(
            _report_writer().submit(self._storage.set_trial_user_attr, trial_id, key, value)
        )

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def _refusal(exc: ValueError) -> str:
    """Why the storage refused a write: its own message, or through the gRPC proxy (whose
    client raises a bare ValueError) the server's, in the call's details."""
    details = getattr(exc.__cause__, "details", None)
    return str(exc) or (str(details()) if callable(details) else "") or "refused by the study"


def _report_writer() -> ThreadPoolExecutor:
    """One thread per process sends reports to the study, in order."""
    from hpsearch._process import ordered_executor

    return ordered_executor("hpsearch-report")


class DistributedTrial(optuna.trial.BaseTrial):
    """The trial as every rank of a data-parallel trial sees it: a full Optuna trial, so an
    objective written for :class:`optuna.Trial` runs unchanged on every rank.

    Rank 0 holds the real (tracked) trial; the others hold none. What rank 0's trial knows
    when the ranks start (parameters sampled from the declared space, their distributions,
    user attributes, start time) is sent to every rank once; a parameter suggested beyond it
    and each prune decision are made on rank 0 and broadcast, so every rank trains the same
    parameters and all of them stop at the same step. Reports and user attributes are
    written by rank 0 alone (the values are already averaged across ranks); every rank sees
    the user attributes it set.
    """

    def __init__(
        self,
        inner: TrackedTrial | None,
        *,
        number: int,
        study_dir: str | None = None,
        stop_on_report: bool = False,
    ) -> None:
        self._inner = inner
        self._number = number
        self._study_dir = study_dir
        self._stop_on_report = stop_on_report  # rank 0 decides, every rank stops there
        start = (
            {
                "params": inner.params,
                "distributions": inner.distributions,
                "user_attrs": inner.user_attrs,
                "datetime_start": inner.datetime_start,
            }
            if inner is not None
            else None
        )
        start = self._bcast(start)
        self._params: dict[str, Any] = dict(start["params"])
        self._distributions: dict[str, BaseDistribution] = dict(start["distributions"])
        self._user_attrs: dict[str, Any] = dict(start["user_attrs"])
        self._datetime_start: datetime.datetime | None = start["datetime_start"]

    def flush_reports(self) -> None:
        """Wait until the study holds rank 0's reports (the other ranks write none)."""
        if self._inner is not None:
            self._inner.flush_reports()

    @staticmethod
    def _bcast(value: Any) -> Any:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _suggest(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
        inner_value = (
            getattr(self._inner, f"suggest_{kind}")(name, *args, **kwargs)
            if self._inner is not None
            else None
        )
        if name in self._params:  # known to every rank since the start: no broadcast
            return self._params[name] if self._inner is None else inner_value
        distribution = self._inner.distributions[name] if self._inner is not None else None
        value, distribution = self._bcast((inner_value, distribution))
        self._params[name], self._distributions[name] = value, distribution
        return value

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return float(self._suggest("float", name, low, high, step=step, log=log))

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        return int(self._suggest("int", name, low, high, step=step, log=log))

    # BaseTrial narrows the return type per choice type with six overloads; one general
    # signature here (what they all resolve to at run time).
    def suggest_categorical(  # type: ignore[override]
        self, name: str, choices: Sequence[CategoricalChoiceType]
    ) -> CategoricalChoiceType:
        value: CategoricalChoiceType = self._suggest("categorical", name, choices)
        return value

    # Optuna's deprecated forms, for objectives that still use them.
    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high, log=True)

    def suggest_discrete_uniform(self, name: str, low: float, high: float, q: float) -> float:
        return self.suggest_float(name, low, high, step=q)

    def report(self, value: float, step: int) -> None:
        if self._stop_on_report:
            from hpsearch.trial._stop import stop_requested

            asked = stop_requested(self._study_dir) if self._inner is not None else None
            if self._bcast(asked):
                raise TrialStopped(self._inner.last_step if self._inner is not None else None)
        if self._inner is not None:
            self._inner.report(value, step)
        elif not isinstance(value, (list, tuple)) and not math.isfinite(float(value)):
            raise TrialDiverged(f"value is {value} at step {step}", step=step, value=value)

    def should_prune(self) -> bool:
        return bool(self._bcast(self._inner.should_prune() if self._inner is not None else None))

    def already_reported(self, step: int) -> bool:
        return self._inner.already_reported(step) if self._inner is not None else False

    def set_user_attr(self, key: str, value: Any) -> None:
        self._user_attrs[key] = value
        if self._inner is not None:
            self._inner.set_user_attr(key, value)

    def set_constraint(self, key: str, value: float) -> None:
        if self._inner is not None:
            self._inner.set_constraint(key, value)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return dict(self._user_attrs)

    @property
    def datetime_start(self) -> datetime.datetime | None:
        return self._datetime_start

    @property
    def number(self) -> int:
        return self._number
