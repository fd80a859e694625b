"""The built-in objective's epochs, and the checkpoint helpers they share with it.

Each epoch, in this order: train, evaluate, log, report to Optuna, pause (a scheduler's),
ask the pruner, checkpoint (every ``objective.checkpoint_interval`` seconds at most, and
before a stop), stop (when the run asks its trials to). Every rank runs the same epochs;
what all ranks must agree on (a stop, a checkpoint of a collective state) is rank 0's,
broadcast.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna

from hpsearch.exceptions import MetricNotReported, TrialDiverged
from hpsearch.trial import active as faults_active
from hpsearch.trial import fault_point

if TYPE_CHECKING:
    import torch

    from hpsearch.data import DataSplit
    from hpsearch.spec import Strategy, StudySpec
    from hpsearch.training._memory import MemoryMonitor
    from hpsearch.trial import TrialContext


@dataclass
class _Training:
    """What one built-in trial trains with, built once by the built-in objective."""

    trainer: Any
    data: DataSplit
    device: torch.device
    precision: str
    strategy: Strategy
    n_params: int


def _dir(ctx: TrialContext) -> str:
    return str(ctx.study_dir)


def _last_metrics(spec: Any, history: dict[int, dict[str, float]], value: Any) -> dict[str, Any]:
    """Every metric of the last epoch, as it computed them (its history keeps all but the
    objectives' values, which the checkpoint keeps apart)."""
    metrics: dict[str, Any] = dict(history[max(history)]) if history else {}
    if spec.is_multi_objective:
        metrics.update(zip(spec.metrics, value, strict=False))
    else:
        metrics[spec.metric] = value
    return metrics


def _stop_asked(ctx: TrialContext) -> bool:
    """Whether the run asks its trials to stop (rank 0 looks; every rank follows)."""
    from hpsearch.trial import stop_requested

    asked = stop_requested(ctx.study_dir, ctx.trial_number) if ctx.is_main else None
    return bool(_broadcast(asked, ctx))


def _epochs(
    trial: optuna.Trial,
    ctx: TrialContext,
    run: _Training,
    checkpoints: Any,
    first_epoch: int,
    value: Any,
    history: dict[int, dict[str, float]],
    monitor: MemoryMonitor,
) -> Any:
    """Train the epochs from ``first_epoch`` to ``objective.epochs``; the last one's value."""
    from hpsearch.search.pareto import apply_constraints

    loop = _EpochLoop(trial, ctx, run, checkpoints, history, monitor)
    for epoch in range(first_epoch, ctx.spec.objective.epochs + 1):
        value = loop.epoch(epoch)
    apply_constraints(trial, ctx.spec, _last_metrics(ctx.spec, history, value))
    return value


class _EpochLoop:
    """One built-in trial's epochs, each in this order: train, evaluate, log, report, pause
    or prune, checkpoint, stop.

    It fills ``history`` (the caller's: each epoch's metrics but the objectives' values) and
    keeps the trial's training time and its last checkpoint's time; it never changes the
    spec. Every rank runs it: what all ranks must agree on is rank 0's, broadcast.
    """

    def __init__(
        self,
        trial: optuna.Trial,
        ctx: TrialContext,
        run: _Training,
        checkpoints: Any,
        history: dict[int, dict[str, float]],
        monitor: MemoryMonitor,
    ) -> None:
        self.trial = trial
        self.ctx = ctx
        self.spec = ctx.spec
        self.run = run
        self.trainer = run.trainer
        self.checkpoints = checkpoints
        self.history = history
        self.monitor = monitor
        self.interval = float(self.spec.objective.checkpoint_interval or 0.0)
        self.last_checkpoint = -math.inf
        # Training time so far, kept across a resume (the last checkpointed epoch's).
        self.trained_s = float(history[max(history)].get("train_seconds", 0.0)) if history else 0.0

    def epoch(self, epoch: int) -> Any:
        """Run ``epoch``; its value (a list of values with several objectives). Raises
        TrialPaused, TrialPruned or TrialStopped where the trial ends at this epoch."""
        metrics = self._train_and_evaluate(epoch)
        _check_reported(self.spec, metrics)
        everything = dict(metrics)
        value = _pop_objectives(self.spec, metrics)
        self._record(epoch, metrics, everything)
        self.trial.report(value, epoch)
        self._pause_if_asked(epoch, value)
        self._prune_if_told(epoch, everything)
        self._checkpoint_or_stop(epoch, value)
        return value

    def _train_and_evaluate(self, epoch: int) -> dict[str, Any]:
        """The epoch's training and validation metrics, with what the trial costs."""
        epoch_start = time.perf_counter()
        train = self.trainer.train_epoch(self.run.data, epoch)
        eval_start = time.perf_counter()
        val = self.trainer.evaluate(self.run.data)
        eval_s = time.perf_counter() - eval_start
        train["epoch_s"] = time.perf_counter() - epoch_start
        self.trained_s += eval_start - epoch_start
        # What the trial costs, so that a cost can be an objective (see _catalog.COST_METRICS):
        # latency is this rank's evaluation time per validation sample it evaluated.
        per_rank = max(1, math.ceil(int(self.run.data.n_val) / max(1, self.ctx.world_size)))
        train.update(
            params=float(self.run.n_params),
            train_seconds=self.trained_s,
            latency_ms=1000.0 * eval_s / per_rank,
        )
        _check_finite(self.trainer.loss_keys, train, epoch)
        train.pop("samples", None)
        return {**train, **val}

    def _record(self, epoch: int, metrics: dict[str, Any], everything: dict[str, Any]) -> None:
        """Log the epoch's metrics (with the memory's: collective), keep them in the
        history, and write what constraints need before the step's values are reported."""
        from hpsearch.search.pareto import CONSTRAINTS_ATTR, constraint_values

        spec = self.spec
        # A resumed trial's run skips the steps it holds.
        self.ctx.log_metrics({**metrics, **self.monitor.epoch_metrics()}, step=epoch)
        self.history[epoch] = {**metrics, "train_seconds": self.trained_s}
        if spec.is_multi_objective and any(m not in spec.metrics for m in spec.constraints):
            # What the pruner or scheduler needs to rank this step under the constraints,
            # written before the step's values so that no one sees those without these.
            self.trial.set_user_attr(
                f"{CONSTRAINTS_ATTR}{epoch}", constraint_values(spec.constraints, everything)
            )

    def _state(self, epoch: int, value: Any) -> dict[str, Any]:
        """What a checkpoint of ``epoch`` keeps besides the trainer."""
        return {"epoch": epoch, "value": value, "metrics": self.history}

    def _pause_if_asked(self, epoch: int, value: Any) -> None:
        """A scheduler's pause at ``epoch`` (not the last): the checkpoint is on disk before
        the set is freed (TrialPaused)."""
        from hpsearch.trial import TrialPaused

        if self.ctx.pauses_at(epoch) and epoch < self.spec.objective.epochs:
            _reports_in_study(self.trial)
            _save(self.checkpoints, self.trainer, self._state(epoch, value))
            raise TrialPaused(epoch)

    def _prune_if_told(self, epoch: int, everything: dict[str, Any]) -> None:
        """The pruner's decision: a pruned trial's checkpoint is deleted (TrialPruned)."""
        from hpsearch.search.pareto import apply_constraints

        if self.trial.should_prune():
            apply_constraints(self.trial, self.spec, everything)
            if self.checkpoints is not None:
                self.checkpoints.delete()
            raise optuna.TrialPruned(f"pruned at step {epoch}")

    def _checkpoint_or_stop(self, epoch: int, value: Any) -> None:
        """Checkpoint where one is due, or where the run asks its trials to stop (then in
        the foreground, and TrialStopped after it)."""
        now = time.monotonic()
        due = self._checkpoint_due(now)
        last = epoch == self.spec.objective.epochs
        stop = not last and _stop_asked(self.ctx)
        if due or (stop and self.spec.objective.checkpoint_interval is not None):
            self._checkpoint(epoch, value, now, background=not stop)
        if stop:
            from hpsearch.trial import TrialStopped

            raise TrialStopped(epoch)

    def _checkpoint_due(self, now: float) -> bool:
        """Whether ``objective.checkpoint_interval`` has passed since the last checkpoint;
        every rank agrees where the trainer's state is a collective."""
        wanted = self.checkpoints is not None and now - self.last_checkpoint >= self.interval
        due = _due(self.checkpoints, wanted)
        if getattr(self.trainer, "collective_state", False):  # its state_dict is a collective
            due = bool(_broadcast(due, self.ctx))
        return due

    def _checkpoint(self, epoch: int, value: Any, now: float, *, background: bool) -> None:
        """Checkpoint ``epoch``, once the study holds its reports."""
        _reports_in_study(self.trial)
        _save(self.checkpoints, self.trainer, self._state(epoch, value), background=background)
        self.last_checkpoint = now
        if faults_active() and self.checkpoints is not None:
            self.checkpoints.wait()  # a test's fault after the checkpoint: it is on disk
            fault_point("after_checkpoint", self.trial.number, epoch, study_dir=_dir(self.ctx))


def _check_finite(loss_keys: tuple[str, ...], train: dict[str, Any], epoch: int) -> None:
    """Every loss that must stay finite did (else TrialDiverged)."""
    for key in loss_keys:
        if not math.isfinite(train[key]):
            raise TrialDiverged(
                f"{key} is {train[key]} at step {epoch}", step=epoch, value=train[key]
            )


def _check_reported(spec: StudySpec, metrics: dict[str, Any]) -> None:
    """Every optimized metric is among the epoch's (else MetricNotReported)."""
    for name in spec.metrics:
        if name not in metrics:
            field = "objective.metrics" if spec.is_multi_objective else "objective.metric"
            raise MetricNotReported(
                f"{field} {name!r} is not computed by model "
                f"{spec.objective.model!r} (it reports: {', '.join(sorted(metrics))})"
            )


def _pop_objectives(spec: StudySpec, metrics: dict[str, Any]) -> Any:
    """The epoch's value (a list with several objectives), taken out of ``metrics``."""
    if spec.is_multi_objective:
        return [metrics.pop(name) for name in spec.metrics]
    return metrics.pop(spec.metric)


def _reports_in_study(trial: Any) -> None:
    """Wait until the study holds every report made so far, before a checkpoint is written.

    Reports reach the study from a background thread; a checkpoint of epoch N written while
    epoch N's report was still on its way would, if the worker or the coordinator were
    killed right then, resume the trial after epoch N with that report lost for good (the
    resumed trial never reports an epoch twice). The wait is one round trip per checkpoint.
    """
    flush = getattr(trial, "flush_reports", None)
    if flush is not None:
        flush()


def _save(checkpoints, trainer, state: dict, *, background: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Checkpoint the trainer with ``state`` (epoch, value, metrics); every rank calls it."""
    from hpsearch.training._fsdp import ShardedCheckpointStore

    state = {**state, "trainer": trainer.state_dict()}  # a collective for some trainers
    if isinstance(checkpoints, ShardedCheckpointStore):
        checkpoints.save(state, trainer)  # collective: every rank writes its shards
    elif checkpoints is not None:
        checkpoints.save(state, background=background)


def _due(checkpoints, wanted: bool) -> bool:  # type: ignore[no-untyped-def]
    """Whether to checkpoint now; a sharded store makes every rank agree with rank 0."""
    due = getattr(checkpoints, "due", None)
    return bool(due(wanted)) if due is not None else wanted


def _broadcast(state, ctx):  # type: ignore[no-untyped-def]
    """Rank 0's checkpoint (or ``None``) on every rank."""
    if ctx.world_size == 1:
        return state
    import torch.distributed as dist

    box = [state]
    dist.broadcast_object_list(box, src=0)
    return box[0]
