"""The built-in objective: train a model family on a built-in data set, one report per epoch.

It is an ordinary Optuna objective ``(trial, ctx) -> float``, run by the same runner as a
user's own objective. Each epoch, in this order: train, evaluate, log, report to Optuna, ask
the pruner, checkpoint (every ``objective.checkpoint_interval`` seconds at most). A trial
that runs again resumes after its last checkpoint and does not report an epoch twice; one
whose checkpoint is of its last epoch (its end was never told) ends with that epoch's value,
training nothing. When the run asks its trials to stop (Ctrl-C), a trial stops at the end of
its epoch, its checkpoint written (:class:`~hpsearch.trial._stop.TrialStopped`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import optuna

from hpsearch.exceptions import MetricNotReported, TrialDiverged
from hpsearch.spec import Strategy
from hpsearch.tracking import tag
from hpsearch.trial import active as faults_active
from hpsearch.trial import fault_point

if TYPE_CHECKING:
    from hpsearch.trial import TrialContext


def builtin_objective(trial: optuna.Trial, ctx: TrialContext) -> Any:
    import torch

    from hpsearch.data import load_dataset
    from hpsearch.models import get_family
    from hpsearch.search import suggest
    from hpsearch.training._amp import describe_device, resolve_precision
    from hpsearch.training._fsdp import ShardedCheckpointStore
    from hpsearch.training._memory import MemoryMonitor
    from hpsearch.training._trainers import make_trainer
    from hpsearch.trial import CheckpointStore

    spec = ctx.spec
    torch.set_num_threads(ctx.n_threads)
    family = get_family(spec.objective.model)
    params = {**spec.objective.params, **suggest(trial, spec.space)}
    seed = int(spec.search.seed or 0)
    data = load_dataset(spec.objective.dataset, seed=seed, source=spec.source)
    device = torch.device(ctx.device)
    precision = resolve_precision(spec.objective.precision, device)
    torch.manual_seed(seed * 1_000_003 + trial.number)
    model = family.build(params, data)
    n_params = sum(int(p.numel()) for p in model.parameters())
    layout = spec.parallel_for(params)
    replicas = ctx.world_size  # copies of the model training on shares of the batch
    if layout.strategy is Strategy.PIPELINE:
        replicas //= int(layout.stages or ctx.world_size)
    if replicas > 1 and params.get("lr_scaling") == "linear":
        params["lr"] = float(params.get("lr", 1e-3)) * replicas
    strategy = layout.strategy
    trainer = make_trainer(
        family,
        model,
        params,
        data,
        device=device,
        precision=precision,
        seed=seed * 7919 + trial.number,
        rank=ctx.rank,
        world_size=ctx.world_size,
        parallel=layout,
    )
    keep = spec.objective.checkpoint_interval is not None
    settings = _optimizer_settings(trainer)
    checkpoints: Any
    if strategy is Strategy.FSDP:  # sharded: every rank writes and reads its own shards
        checkpoints = (
            ShardedCheckpointStore(
                ctx.checkpoint_dir, trial.number, rank=ctx.rank, world_size=ctx.world_size
            )
            if keep
            else None
        )
        state = (
            checkpoints.load_into(trainer, resumed=ctx.resumed) if checkpoints is not None else None
        )
    else:
        checkpoints = (
            CheckpointStore(ctx.checkpoint_dir, trial.number) if ctx.is_main and keep else None
        )
        state = _broadcast(
            checkpoints.load() if checkpoints is not None and ctx.resumed else None, ctx
        )
    first_epoch = 1
    history: dict[int, dict[str, float]] = {}
    if state is not None:
        fault_point("in_resume_load", trial.number, int(state["epoch"]), study_dir=_dir(ctx))
        if "trainer" in state:
            trainer.load_state_dict(state["trainer"])
        # The trial's parameters set the optimizers (a continuation's are perturbed); the
        # checkpoint restores their state (moments, momentum buffers).
        _apply_settings(settings)
        first_epoch = int(state["epoch"]) + 1
        history = dict(state.get("metrics", {}))
        for epoch, logged in sorted(history.items()):
            # Lost with the worker if they had not reached MLflow yet; the run skips the
            # (metric, step) pairs it already holds.
            ctx.log_metrics(logged, step=epoch)
    name, memory = describe_device(device)
    ctx.set_tags(
        {
            tag.PRECISION: precision,
            tag.WORLD_SIZE: ctx.world_size,
            tag.DEVICE_NAME: name,
            tag.DEVICE_MEMORY_MIB: memory,
            tag.TASK: data.task,
            tag.N_TRAIN: data.n_train,
            tag.N_VAL: data.n_val,
            tag.RESUMED_FROM_EPOCH: first_epoch - 1,
            tag.PARALLEL: getattr(trainer, "layout", strategy.value),
        }
    )
    value: Any = float("nan") if state is None else state["value"]
    # Checkpoint writes still in flight at the end are left to land on their own: the
    # trial's result does not depend on them.
    monitor = MemoryMonitor(
        trainer,
        device=device,
        rank=ctx.rank,
        world_size=ctx.world_size,
        cap=spec.objective.max_memory_per_device,
        strategy=strategy,
        share=spec.trial_devices,
    )
    if first_epoch > spec.objective.epochs:  # its last epoch is done: its end was not told
        from hpsearch.search.pareto import apply_constraints

        apply_constraints(trial, spec, _last_metrics(spec, history, value))
        return value
    with monitor:
        value = _epochs(
            trial, ctx, trainer, data, checkpoints, first_epoch, value, history, monitor, n_params
        )
    trainer.finish(ctx)
    if trainer.skipped_steps:
        ctx.log_metrics({"amp_skipped_steps": trainer.skipped_steps}, step=spec.objective.epochs)
    return value


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
    trial,
    ctx,
    trainer,
    data,
    checkpoints,
    first_epoch: int,
    value: Any,
    history: dict,
    monitor,
    n_params: int,
) -> Any:  # type: ignore[no-untyped-def]
    from hpsearch.search.pareto import CONSTRAINTS_ATTR, apply_constraints, constraint_values
    from hpsearch.trial import TrialPaused

    spec = ctx.spec
    metric = spec.metric
    wanted = spec.metrics
    interval = float(spec.objective.checkpoint_interval or 0.0)
    last_checkpoint = -math.inf
    # Training time so far, kept across a resume (the last checkpointed epoch's).
    trained_s = float(history[max(history)].get("train_seconds", 0.0)) if history else 0.0
    for epoch in range(first_epoch, spec.objective.epochs + 1):
        epoch_start = time.perf_counter()
        train = trainer.train_epoch(data, epoch)
        eval_start = time.perf_counter()
        val = trainer.evaluate(data)
        eval_s = time.perf_counter() - eval_start
        train["epoch_s"] = time.perf_counter() - epoch_start
        trained_s += eval_start - epoch_start
        # What the trial costs, so that a cost can be an objective (see _catalog.COST_METRICS):
        # latency is this rank's evaluation time per validation sample it evaluated.
        per_rank = max(1, math.ceil(int(data.n_val) / max(1, ctx.world_size)))
        train.update(
            params=float(n_params), train_seconds=trained_s, latency_ms=1000.0 * eval_s / per_rank
        )
        for key in trainer.loss_keys:
            if not math.isfinite(train[key]):
                raise TrialDiverged(
                    f"{key} is {train[key]} at step {epoch}", step=epoch, value=train[key]
                )
        train.pop("samples", None)
        metrics = {**train, **val}
        for name in wanted:
            if name not in metrics:
                field = "objective.metrics" if spec.is_multi_objective else "objective.metric"
                raise MetricNotReported(
                    f"{field} {name!r} is not computed by model "
                    f"{spec.objective.model!r} (it reports: {', '.join(sorted(metrics))})"
                )
        everything = dict(metrics)
        if spec.is_multi_objective:
            value = [metrics.pop(name) for name in wanted]
        else:
            value = metrics.pop(metric)
        # A resumed trial's run skips the steps it holds.
        ctx.log_metrics({**metrics, **monitor.epoch_metrics()}, step=epoch)
        history[epoch] = {**metrics, "train_seconds": trained_s}
        if spec.is_multi_objective and any(m not in wanted for m in spec.constraints):
            # What the pruner or scheduler needs to rank this step under the constraints,
            # written before the step's values so that no one sees those without these.
            trial.set_user_attr(
                f"{CONSTRAINTS_ATTR}{epoch}", constraint_values(spec.constraints, everything)
            )
        trial.report(value, epoch)
        if ctx.pauses_at(epoch) and epoch < spec.objective.epochs:
            # A scheduler's pause: the checkpoint is on disk before the set is freed.
            _reports_in_study(trial)
            _save(checkpoints, trainer, {"epoch": epoch, "value": value, "metrics": history})
            raise TrialPaused(epoch)
        if trial.should_prune():
            apply_constraints(trial, spec, everything)
            if checkpoints is not None:
                checkpoints.delete()
            raise optuna.TrialPruned(f"pruned at step {epoch}")
        now = time.monotonic()
        due = _due(checkpoints, checkpoints is not None and now - last_checkpoint >= interval)
        if getattr(trainer, "collective_state", False):  # its state_dict is a collective
            due = bool(_broadcast(due, ctx))
        last = epoch == spec.objective.epochs
        stop = not last and _stop_asked(ctx)
        if due or (stop and spec.objective.checkpoint_interval is not None):
            _reports_in_study(trial)
            _save(
                checkpoints,
                trainer,
                {"epoch": epoch, "value": value, "metrics": history},
                background=not stop,
            )
            last_checkpoint = now
            if faults_active() and checkpoints is not None:
                checkpoints.wait()  # a test's fault after the checkpoint: it is on disk
                fault_point("after_checkpoint", trial.number, epoch, study_dir=_dir(ctx))
        if stop:
            from hpsearch.trial import TrialStopped

            raise TrialStopped(epoch)
    apply_constraints(trial, spec, _last_metrics(spec, history, value))
    return value


def _optimizer_settings(trainer: Any) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Each optimizer of the trainer with its groups' settings (lr, weight decay, ...)."""
    import torch

    return [
        (opt, [{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups])
        for opt in vars(trainer).values()
        if isinstance(opt, torch.optim.Optimizer)
    ]


def _apply_settings(settings: list[tuple[Any, list[dict[str, Any]]]]) -> None:
    for opt, groups in settings:
        for group, wanted in zip(opt.param_groups, groups, strict=False):
            group.update(wanted)


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
