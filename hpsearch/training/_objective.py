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

from typing import TYPE_CHECKING, Any

import optuna

from hpsearch.spec import Strategy
from hpsearch.tracking import tag
from hpsearch.training._epochs import _broadcast, _dir, _epochs, _last_metrics, _Training
from hpsearch.trial import fault_point

if TYPE_CHECKING:
    from hpsearch.spec import ParallelSpec, StudySpec
    from hpsearch.training._memory import MemoryMonitor
    from hpsearch.trial import TrialContext


def builtin_objective(trial: optuna.Trial, ctx: TrialContext) -> Any:
    """Train the study's model family on its data set, one report per epoch; the value (or
    values) of the last epoch. A trial that ran before resumes after its last checkpoint."""
    import torch

    spec = ctx.spec
    torch.set_num_threads(ctx.n_threads)
    run = _prepare(trial, ctx)
    settings = _optimizer_settings(run.trainer)
    checkpoints, state = _open_checkpoints(trial, ctx, run.trainer, run.strategy)
    first_epoch, history = _resume(trial, ctx, run.trainer, state, settings)
    _set_trial_tags(ctx, run, first_epoch)
    value: Any = float("nan") if state is None else state["value"]
    # Checkpoint writes still in flight at the end are left to land on their own: the
    # trial's result does not depend on them.
    monitor = _memory_monitor(ctx, run)
    if first_epoch > spec.objective.epochs:  # its last epoch is done: its end was not told
        from hpsearch.search.pareto import apply_constraints

        apply_constraints(trial, spec, _last_metrics(spec, history, value))
        return value
    with monitor:
        value = _epochs(trial, ctx, run, checkpoints, first_epoch, value, history, monitor)
    run.trainer.finish(ctx)
    if run.trainer.skipped_steps:
        ctx.log_metrics(
            {"amp_skipped_steps": run.trainer.skipped_steps}, step=spec.objective.epochs
        )
    return value


def _prepare(trial: optuna.Trial, ctx: TrialContext) -> _Training:
    """The trial's data, model and trainer: the fixed and suggested parameters, the study's
    seed (the model's initial weights follow the trial number), the device's precision and
    the trial's parallel layout."""
    import torch

    from hpsearch.data import load_dataset
    from hpsearch.models import get_family
    from hpsearch.training._amp import resolve_precision
    from hpsearch.training._trainers import make_trainer

    spec = ctx.spec
    family = get_family(spec.objective.model)
    params = _params(trial, spec)
    seed = int(spec.search.seed or 0)
    data = load_dataset(spec.objective.dataset, seed=seed, source=spec.source)
    device = torch.device(ctx.device)
    precision = resolve_precision(spec.objective.precision, device)
    torch.manual_seed(seed * 1_000_003 + trial.number)
    model = family.build(params, data)
    n_params = sum(int(p.numel()) for p in model.parameters())
    layout = spec.parallel_for(params)
    _scale_lr(params, _replicas(layout, ctx.world_size))
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
    return _Training(trainer, data, device, precision, layout.strategy, n_params)


def _params(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    """The trial's hyperparameters: ``objective.params``, then those the sampler suggests."""
    from hpsearch.search import suggest

    return {**spec.objective.params, **suggest(trial, spec.space)}


def _replicas(layout: ParallelSpec, world_size: int) -> int:
    """Copies of the model training on shares of the batch: one per rank, or one per
    pipeline (of ``stages`` ranks) in a pipeline layout."""
    if layout.strategy is Strategy.PIPELINE:
        return world_size // int(layout.stages or world_size)
    return world_size


def _scale_lr(params: dict[str, Any], replicas: int) -> None:
    """``lr_scaling: linear``: ``lr`` times the replicas, in ``params`` (nothing else is
    changed, and nothing at all with one replica)."""
    if replicas > 1 and params.get("lr_scaling") == "linear":
        params["lr"] = float(params.get("lr", 1e-3)) * replicas


def _open_checkpoints(
    trial: optuna.Trial, ctx: TrialContext, trainer: Any, strategy: Strategy
) -> tuple[Any, dict[str, Any] | None]:
    """The trial's checkpoint store and the state it resumes from (``None``: from the start).

    No store without ``objective.checkpoint_interval``. Sharded (fsdp): every rank writes
    and reads its own shards, loaded into the trainer here. Otherwise rank 0 alone keeps
    the store and its state is broadcast to every rank.
    """
    from hpsearch.training._fsdp import ShardedCheckpointStore
    from hpsearch.trial import CheckpointStore

    keep = ctx.spec.objective.checkpoint_interval is not None
    if strategy is Strategy.FSDP:
        if not keep:
            return None, None
        sharded = ShardedCheckpointStore(
            ctx.checkpoint_dir, trial.number, rank=ctx.rank, world_size=ctx.world_size
        )
        return sharded, sharded.load_into(trainer, resumed=ctx.resumed)
    checkpoints = (
        CheckpointStore(ctx.checkpoint_dir, trial.number) if ctx.is_main and keep else None
    )
    state = _broadcast(checkpoints.load() if checkpoints is not None and ctx.resumed else None, ctx)
    return checkpoints, state


def _resume(
    trial: optuna.Trial,
    ctx: TrialContext,
    trainer: Any,
    state: dict[str, Any] | None,
    settings: list[tuple[Any, list[dict[str, Any]]]],
) -> tuple[int, dict[int, dict[str, float]]]:
    """The first epoch to train and the metrics of the epochs done (1 and none without a
    checkpoint). From a checkpoint the trainer's state is restored, then its optimizers get
    the trial's ``settings``, and the epochs done are logged again."""
    if state is None:
        return 1, {}
    fault_point("in_resume_load", trial.number, int(state["epoch"]), study_dir=_dir(ctx))
    if "trainer" in state:
        trainer.load_state_dict(state["trainer"])
    # The trial's parameters set the optimizers (a continuation's are perturbed); the
    # checkpoint restores their state (moments, momentum buffers).
    _apply_settings(settings)
    history = dict(state.get("metrics", {}))
    for epoch, logged in sorted(history.items()):
        # Lost with the worker if they had not reached MLflow yet; the run skips the
        # (metric, step) pairs it already holds.
        ctx.log_metrics(logged, step=epoch)
    return int(state["epoch"]) + 1, history


def _set_trial_tags(ctx: TrialContext, run: _Training, first_epoch: int) -> None:
    """Tag the trial's run with how it trains: precision, devices, data, layout and the
    epoch it resumed from."""
    from hpsearch.training._amp import describe_device

    name, memory = describe_device(run.device)
    ctx.set_tags(
        {
            tag.PRECISION: run.precision,
            tag.WORLD_SIZE: ctx.world_size,
            tag.DEVICE_NAME: name,
            tag.DEVICE_MEMORY_MIB: memory,
            tag.TASK: run.data.task,
            tag.N_TRAIN: run.data.n_train,
            tag.N_VAL: run.data.n_val,
            tag.RESUMED_FROM_EPOCH: first_epoch - 1,
            tag.PARALLEL: getattr(run.trainer, "layout", run.strategy.value),
        }
    )


def _memory_monitor(ctx: TrialContext, run: _Training) -> MemoryMonitor:
    """The monitor of the trial's memory per rank, capped by
    ``objective.max_memory_per_device`` (its share of it, where trials are packed)."""
    from hpsearch.training._memory import MemoryMonitor

    return MemoryMonitor(
        run.trainer,
        device=run.device,
        rank=ctx.rank,
        world_size=ctx.world_size,
        cap=ctx.spec.objective.max_memory_per_device,
        strategy=run.strategy,
        share=ctx.spec.trial_devices,
    )


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
