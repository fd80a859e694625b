"""One rank of a data-parallel trial, in a rank process: rank 0 runs the trial as the runner
does in a worker (:func:`~hpsearch.worker._runner.execute`), the other ranks train
alongside and follow its decisions."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import optuna

from hpsearch.cluster import ENV_THREADS, WorkerDevices
from hpsearch.exceptions import TrialDiverged, TrialOutOfMemory
from hpsearch.trial import (
    DistributedTrial,
    RunLayout,
    TrialContext,
    TrialOutcome,
    TrialStopped,
    TrialTask,
)
from hpsearch.worker._runner import _objective, _wants_context, execute


def run_rank(payload: dict[str, Any]) -> TrialOutcome | None:
    """One rank of a data-parallel trial, in a rank process: join the group, train, leave."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    task: TrialTask = payload["task"]
    rank, world = int(payload["rank"]), int(payload["world_size"])
    kind = payload["kind"]
    threads = int(os.environ.get(ENV_THREADS) or 1)
    torch.set_num_threads(threads)
    if kind == "cuda":
        torch.cuda.set_device(0)
    timeout = timedelta(seconds=300)
    # The store is served by the worker that runs the trial (it is bound before the ranks
    # hear of it); every rank, rank 0 included, is its client.
    store = dist.TCPStore(
        "127.0.0.1", int(payload["master_port"]), is_master=False, timeout=timeout
    )
    dist.init_process_group(
        "nccl" if kind == "cuda" else "gloo",
        store=store,
        rank=rank,
        world_size=world,
        timeout=timeout,
    )
    try:
        local = ["cuda:0" if kind == "cuda" else "cpu"]
        devices = WorkerDevices(kind, tuple(payload["device_ids"]), threads, False)
        if rank == 0:
            import mlflow  # noqa: F401  (once, before the trial starts MLflow's writer thread)

            outcome = execute(
                task,
                devices=devices,
                device_ids=list(devices.ids),
                local=local,
                n_threads=threads,
                rank=0,
                world_size=world,
                worker=payload.get("worker"),
            )
            from hpsearch.tracking import flush, spool

            # This process may be ended with its pool: leave nothing unwritten, or else on disk.
            if flush(60.0):
                spool(RunLayout.of_study_dir(task.study_dir).tracking_backlog)
            return outcome
        _follow(
            task,
            local=local,
            n_threads=threads,
            rank=rank,
            world_size=world,
            labels=devices.label(devices.ids).split(","),
        )
        return None
    finally:
        dist.destroy_process_group()


def _follow(
    task: TrialTask,
    *,
    local: list[str],
    n_threads: int,
    rank: int,
    world_size: int,
    labels: list[str],
) -> None:
    ctx = TrialContext(
        spec=task.spec,
        trial_number=task.trial_number,
        devices=local,
        n_threads=n_threads,
        study_dir=Path(task.study_dir),
        checkpoint_dir=Path(task.checkpoint_dir),
        worker="",
        resumed=task.resume,
        run=None,
        rank=rank,
        world_size=world_size,
        device_ids=labels,
        stop_at=task.stop_at,
    )
    objective = _objective(task)
    trial = DistributedTrial(
        None,
        number=task.trial_number,
        study_dir=task.study_dir,
        stop_on_report=task.spec.is_user_objective or task.objective is not None,
    )
    # Rank 0 records the decision (a memory cap is checked on numbers gathered from every
    # rank, so rank 0 raises it too).
    with contextlib.suppress(optuna.TrialPruned, TrialDiverged, TrialOutOfMemory, TrialStopped):
        objective(trial, ctx) if _wants_context(objective) else objective(trial)
