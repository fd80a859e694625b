"""Tiny objectives for tests and benchmarks (no training, but for pipeline_transformer and
held_training)."""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

import optuna

if TYPE_CHECKING:
    from hpsearch.trial import TrialContext


def trivial(trial: optuna.Trial) -> float:
    """A few suggests, no report: measures the orchestration's own cost."""
    x = trial.suggest_float("x", -10.0, 10.0)
    y = trial.suggest_float("y", -10.0, 10.0)
    return (x - 2.0) ** 2 + (y + 1.0) ** 2


def staircase(trial: optuna.Trial) -> float:
    """Reports ``x`` at each of 4 steps (minimize): trials above the median get pruned."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(4):
        trial.report(x + 0.01 * step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x


def two_objectives(trial: optuna.Trial) -> tuple[float, float]:
    """Two objectives, both minimized, with a known Pareto front: ``(x, 1 - sqrt(x) + y)``.

    For any ``x`` the best is ``y = 0``, and along ``y = 0`` a smaller first value costs a
    larger second one, so the front is exactly the trials with ``y = 0`` (of the feasible
    ones, when a constraint bounds the first value). Reports both values at steps 1 to 3,
    converging to the final ones from above, and asks the pruner after each.
    """
    x = trial.suggest_float("x", 0.0, 1.0)
    y = trial.suggest_float("y", 0.0, 1.0)
    final = (x, 1.0 - x**0.5 + y)
    for step in range(1, 4):
        extra = 0.1 * (3 - step)
        trial.report((final[0] + extra, final[1] + extra), step)  # type: ignore[arg-type]
        if trial.should_prune():
            raise optuna.TrialPruned()
    return final


def with_context(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Takes the optional context; records the process it ran in."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("devices", list(getattr(ctx, "devices", [])))
    return x


def dynamic(trial: optuna.Trial) -> float:
    """Defines its own space (no ``space`` in the spec): a conditional parameter."""
    kind = trial.suggest_categorical("kind", ["a", "b"])
    x = trial.suggest_float(f"x_{kind}", 0.0, 1.0)
    return x if kind == "a" else x + 0.5


def sampler_history(trial: optuna.Trial) -> float:
    """Records how many trials the samplers see when this trial samples on its worker.

    Every Optuna sampler reads the history through ``Study._get_trials(use_cache=True)``: a
    worker's later trials must see the trials that were added since its first one."""
    seen = len(trial.study._get_trials(deepcopy=False, use_cache=True))
    trial.set_user_attr("sampler_saw", seen)
    return trial.suggest_float("x", 0.0, 1.0)


def raises(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    if trial.number % 2 == 1:
        raise ValueError(f"odd trial {trial.number} refuses x={x:.3f}")
    return x


def returns_nan(trial: optuna.Trial) -> float:
    trial.suggest_float("x", 0.0, 1.0)
    return float("nan")


def reports_nan(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.report(x, 0)
    trial.report(float("nan"), 1)
    return x


def sleepy(trial: optuna.Trial) -> float:
    """Reports once a second for 60 steps: long enough to be killed or interrupted."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(60):
        trial.report(x, step)
        time.sleep(1.0)
    return x


def checkpointed(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Eight steps of a second, checkpointed after each through the trial's context: a trial
    run again goes on after its last checkpoint (the steps each start ran are noted)."""
    x = trial.suggest_float("x", 0.0, 1.0)
    state = ctx.load_checkpoint()
    first = int(state["step"]) + 1 if state else 0
    for step in range(first, 8):
        _note(ctx, trial, f"step {step}")
        trial.report(x + 0.01 * step, step)
        ctx.save_checkpoint({"step": step})
        time.sleep(1.0)
    return x


def pooled(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Eight steps, checkpointed after each, each step noted: a trial on a shared pool that
    can be preempted and resume. A step lasts the seconds written in the study folder's file
    ``step_s``, read again every 0.1 s, so that a test can hold the trials in their step and
    let them go (default 0.4: the workers are the pool's, not the study's processes)."""
    x = trial.suggest_float("x", 0.0, 1.0)
    given = ctx.study_dir / "step_s"
    state = ctx.load_checkpoint()
    first = int(state["step"]) + 1 if state else 1
    for step in range(first, 9):
        began = time.monotonic()
        while time.monotonic() - began < (float(given.read_text()) if given.exists() else 0.4):
            time.sleep(0.1)
        _note(ctx, trial, f"step {step}")
        trial.report(x + 0.01 * step, step)
        ctx.save_checkpoint({"step": step})
    return x


def _note(ctx: TrialContext, trial: optuna.Trial, text: str) -> None:
    """Append a line to this rank's notes file in the study folder (for tests)."""
    folder = ctx.study_dir
    rank = getattr(ctx, "rank", 0)
    with open(folder / f"notes-{trial.number}-rank{rank}.txt", "a") as f:
        f.write(text + "\n")


def ranked_staircase(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Like ``staircase`` on every rank of a data-parallel trial; each rank notes its steps."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(5):
        _note(ctx, trial, f"step {step}")
        trial.report(x + 0.01 * step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x


def trial_api(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Uses the trial as a plain Optuna objective would, on every rank; each rank notes what
    its trial showed (for tests of the data-parallel trial)."""
    import json

    x = trial.suggest_float("x", 0.0, 1.0)  # from the declared space
    depth = trial.suggest_int("depth", 1, 4)  # beyond it: sampled on rank 0
    trial.set_user_attr("depth_seen", depth)
    seen = {
        "base_trial": isinstance(trial, optuna.trial.BaseTrial),
        "number": trial.number,
        "params": trial.params,
        "distributions": sorted(trial.distributions),
        "attempt": trial.user_attrs.get("hpsearch.attempt"),
        "depth_seen": trial.user_attrs.get("depth_seen"),
        "started": trial.datetime_start is not None,
    }
    _note(ctx, trial, json.dumps(seen, sort_keys=True))
    trial.report(x, 0)
    return x + depth


def rank1_raises(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Rank 1 raises at step 2 of trial 0 while rank 0 waits in a collective."""
    import torch
    import torch.distributed as dist

    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(4):
        if trial.number == 0 and step == 2 and getattr(ctx, "rank", 0) == 1:
            raise RuntimeError("rank 1 broke on purpose")
        t = torch.ones(1)
        dist.all_reduce(t)
        trial.report(x, step)
    return x


def ranked_sleepy(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Reports once a second for 8 steps on every rank (to be killed)."""
    import torch
    import torch.distributed as dist

    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(8):
        t = torch.ones(1)
        dist.all_reduce(t)
        trial.report(x, step)
        time.sleep(1.0)
    return x


def ranked_checkpointed(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Six steps of half a second on every rank of a data-parallel trial, ``x + 1/step``
    agreed by an all-reduce, a checkpoint after each (to be killed and resumed); every rank
    notes the steps it trains."""
    import torch
    import torch.distributed as dist

    x = trial.suggest_float("x", 0.0, 1.0)
    state = ctx.load_checkpoint()
    first = state["step"] + 1 if state else 1
    value = float("nan")
    for step in range(first, 7):
        _note(ctx, trial, f"step {step}")
        t = torch.tensor([x + 1.0 / step])
        dist.all_reduce(t)
        value = float(t.item()) / dist.get_world_size()
        trial.report(value, step)
        ctx.save_checkpoint({"step": step}, step)
        time.sleep(0.5)
    return value


def record_devices(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Records the devices it ran on and when (for exclusivity checks)."""
    x = trial.suggest_float("x", 0.0, 1.0)
    size = trial.suggest_categorical("gpus_per_trial", [1, 2])
    start = time.time()
    time.sleep(0.4)
    if getattr(ctx, "rank", 0) == 0:
        trial.set_user_attr("devices", list(getattr(ctx, "device_ids", [])))
        trial.set_user_attr("span", [start, time.time()])
        trial.set_user_attr("size", size)
    return x


def hangs_on_odd(trial: optuna.Trial) -> float:
    """Odd trials hang forever after one report (a deadlock, a stuck loader); even ones end."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.report(x, 0)
    if trial.number % 2:
        threading.Event().wait()
    return x


def steady(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Eight steps of half a second, each reported and logged with a second metric."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(1, 9):
        time.sleep(0.5)
        trial.report(x / step, step)
        ctx.log_metrics({"other": float(step)}, step)  # type: ignore[attr-defined]
    return x / 8


def runs_out_of_memory(trial: optuna.Trial) -> float:
    """Even trials run out of device memory after one report, as a too-large batch would."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.report(x, 0)
    if trial.number % 2 == 0:
        import torch

        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 15.77 GiB total capacity)"
        )
    return x


def fsdp_rank1_raises(trial: optuna.Trial, ctx: TrialContext) -> float:
    """A tiny model sharded with hpsearch's fsdp over the trial's ranks; in trial 0, rank 1
    raises at step 2 while rank 0 waits in FSDP's all-gather."""
    import torch

    from hpsearch.training import shard

    x = trial.suggest_float("x", 0.0, 1.0)
    torch.manual_seed(0)
    model = shard(
        torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)),
        precision="fp32",
        world_size=ctx.world_size,
        device=torch.device("cpu"),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(4):
        if trial.number == 0 and step == 2 and ctx.rank == 1:
            raise RuntimeError("rank 1 broke on purpose")
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        trial.report(x, step)
    return x


def pipeline_transformer(trial: optuna.Trial, ctx: TrialContext) -> float:
    """The built-in transformer objective, with each rank noting the steps it trains.

    ``objective.params`` may hold ``fail_rank`` and ``fail_step``: that rank raises at the
    start of that step (while its pipeline's other stages wait for it)."""
    import dataclasses

    from hpsearch.spec import StudySpec
    from hpsearch.training import PipelineTrainer, builtin_objective

    raw = ctx.spec.to_dict()
    raw["objective"].update(model="transformer", metric=None, direction=None)
    spec = StudySpec.from_dict(raw)
    params = spec.objective.params
    original = PipelineTrainer.train_epoch

    def train_epoch(self: PipelineTrainer, data: Any, epoch: int) -> dict[str, float]:
        if params.get("fail_rank") == ctx.rank and params.get("fail_step") == epoch:
            raise RuntimeError(f"rank {ctx.rank} (stage {self.stage}) broke on purpose")
        _note(ctx, trial, f"step {epoch}")
        return original(self, data, epoch)

    PipelineTrainer.train_epoch = train_epoch  # type: ignore[method-assign]
    try:
        return builtin_objective(trial, dataclasses.replace(ctx, spec=spec))
    finally:
        PipelineTrainer.train_epoch = original  # type: ignore[method-assign]


def rung_checkpointed(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Minimize ``x + 1/step`` over ``objective.epochs`` steps, resuming from its checkpoint
    (the two calls a scheduler needs: ``ctx.load_checkpoint``, ``ctx.save_checkpoint``);
    notes each step it trains, so a test sees that no step runs twice."""
    x = trial.suggest_float("x", 0.0, 1.0)
    state = ctx.load_checkpoint()
    first = state["step"] + 1 if state else 1
    value = float("nan")
    for step in range(first, ctx.spec.objective.epochs + 1):
        value = x + 1.0 / step
        _note(ctx, trial, f"step {step}")
        trial.report(value, step)
        ctx.save_checkpoint({"step": step, "value": value}, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return value


def two_objectives_checkpointed(trial: optuna.Trial, ctx: TrialContext) -> tuple[float, float]:
    """:func:`two_objectives` over ``objective.epochs`` steps, resuming from its checkpoint
    (for a scheduler): at step ``s`` it reports the final values plus
    ``0.1 * (epochs - s)``; notes each step it trains, so a test sees that none runs twice."""
    x = trial.suggest_float("x", 0.0, 1.0)
    y = trial.suggest_float("y", 0.0, 1.0)
    final = (x, 1.0 - x**0.5 + y)
    epochs = ctx.spec.objective.epochs
    state = ctx.load_checkpoint()
    first = state["step"] + 1 if state else 1
    for step in range(first, epochs + 1):
        extra = 0.1 * (epochs - step)
        _note(ctx, trial, f"step {step}")
        trial.report((final[0] + extra, final[1] + extra), step)  # type: ignore[arg-type]
        ctx.save_checkpoint({"step": step}, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return final


def held_training(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Three epochs of a tiny regression in torch, each logging ``samples_per_s`` and
    ``epoch_s`` as the built-in loop does; while the study folder holds a file ``hold``, the
    trial waits after its first epoch (up to 5 minutes), so a test can look at a study that
    is surely running."""
    import torch

    lr = trial.suggest_float("lr", 1e-3, 1e-1, log=True)
    torch.manual_seed(trial.number)
    x = torch.randn(4096, 16)
    y = x @ torch.randn(16, 1) + 0.1 * torch.randn(4096, 1)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for epoch in range(1, 4):
        start = time.perf_counter()
        for i in range(0, len(x), 64):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[i : i + 64]), y[i : i + 64])
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - start
        ctx.log_metrics({"samples_per_s": len(x) / seconds, "epoch_s": seconds}, epoch)
        trial.report(float(loss), epoch)
        deadline = time.monotonic() + 300
        while epoch == 1 and (ctx.study_dir / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return float(loss)


def lineage_walk(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Minimize ``1 - w``: each step moves ``w`` the share ``rate`` of the way to 1, so a
    larger rate leads. The state (``w``, the step, the trial that wrote it) is checkpointed
    after each step; a trial that starts from a checkpoint records what it loaded as the
    user attribute ``loaded_<step>`` (population-based training's continuations load their
    parent's), and each step trained is noted. ``objective.params.step_s`` makes each step
    last that many seconds (default 0)."""
    rate = trial.suggest_float("rate", 0.05, 0.5, log=True)
    step_s = float(ctx.spec.objective.params.get("step_s", 0.0))
    state = ctx.load_checkpoint()
    w, first = 0.0, 1
    if state is not None:
        w, first = float(state["w"]), int(state["step"]) + 1
        if ctx.is_main:
            trial.set_user_attr(f"loaded_{state['step']}", {"trial": state["trial"], "w": w})
    value = float("nan")
    for step in range(first, ctx.spec.objective.epochs + 1):
        w += rate * (1.0 - w)
        value = 1.0 - w
        _note(ctx, trial, f"step {step}")
        trial.report(value, step)
        ctx.save_checkpoint({"step": step, "w": w, "trial": trial.number}, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
        time.sleep(step_s)
    return value


def allocator_maps_each_time(size: int = 1 << 20) -> bool:
    """Whether glibc maps a freed-and-asked-again block of ``size`` bytes anew each time (with
    page faults on every use): what a set malloc threshold (Dask's ``MALLOC_TRIM_THRESHOLD_``)
    does to a tensor of a training loop. ``False`` where glibc's dynamic threshold, or the
    thresholds of :func:`hpsearch.cluster._env.tune_allocator`, keep it in the heap."""
    import ctypes

    fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (*fields, "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    votes = 0
    for _ in range(3):  # another thread's large block could move the count once
        libc.free(libc.malloc(size))  # a freed mapped block raises the dynamic threshold
        before = libc.mallinfo2().hblks
        block = libc.malloc(size)
        votes += libc.mallinfo2().hblks > before
        libc.free(block)
    return votes >= 2


def environment(trial: optuna.Trial, ctx: TrialContext) -> float:
    """Records what a trial's process gives training: its thread settings and whether its
    allocator maps a tensor's memory anew on each allocation."""
    import torch

    trial.suggest_float("x", 0.0, 1.0)
    if getattr(ctx, "rank", 0) == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith(("MALLOC_", "OMP_", "MKL_"))}
        trial.set_user_attr("env", env)
        trial.set_user_attr("torch_threads", torch.get_num_threads())
        trial.set_user_attr("ctx_threads", ctx.n_threads)
        trial.set_user_attr("maps_each_time", allocator_maps_each_time())
        trial.set_user_attr("pid", os.getpid())
    return 0.0
