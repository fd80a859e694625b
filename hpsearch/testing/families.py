"""Each built-in family trained briefly, alone or as ranks of a gloo process group.

Used by the tests (and handy to try a family by hand): :func:`train_briefly` trains one
family on a small slice of its data set and returns the metrics of every epoch;
:func:`ddp_rank` is the body of one rank of a data-parallel run over every family, and
:func:`fsdp_resume_rank` one rank of a sharded run that checkpoints and resumes.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpsearch.spec import Strategy

#: name: (family, data set, hyperparameters, epochs) — small slices, a few seconds each.
CASES: dict[str, tuple[str, Any, dict[str, Any], int]] = {
    "cnn": ("cnn", {"name": "digits", "limit": 600}, {"lr": 3e-3}, 4),
    "rnn": ("rnn", {"name": "digits-seq", "limit": 800}, {"lr": 1e-2}, 5),
    "rnn-text": (
        "rnn",
        {"name": "docs-or-code", "per_class": 600},
        {"lr": 1e-2, "hidden_size": 32},
        4,
    ),
    "lstm": ("lstm", {"name": "digits-seq", "limit": 800}, {"lr": 1e-2, "hidden_size": 64}, 5),
    "lstm-text": (
        "lstm",
        {"name": "python-docs", "max_chars": 40000},
        {"lr": 1e-2, "hidden_size": 64, "embedding_dim": 32},
        3,
    ),
    "gan": ("gan", "digits", {"batch_size": 32}, 25),
    "transformer": (
        "transformer",
        {"name": "python-docs", "max_chars": 40000},
        {"lr": 3e-3, "width": 32, "depth": 2, "heads": 4, "dropout": 0.0, "seq_len": 32},
        3,
    ),
}


@contextlib.contextmanager
def rendezvous() -> Iterator[int]:
    """The port of a TCP store bound here, on a port the system picks, and held until the
    block ends: ranks started meanwhile join it with :func:`join_gloo`. Binding first means
    no other process can take the port between choosing it and using it.

    >>> with rendezvous() as port:
    ...     port > 0
    True
    """
    from hpsearch.worker import rendezvous_store

    store = rendezvous_store()
    try:
        yield int(store.port)
    finally:
        del store


def exit_when_done(rank: int, fn: Any, *args: Any) -> None:
    """Run ``fn(rank, *args)`` as a spawned rank, then end the process at once.

    A gloo rank can abort (SIGABRT, "terminate called without an active exception") in its
    interpreter's exit, after its work is done and its results are written: a thread of
    torch.distributed's C++ side still runs while the process finalises (seen under load,
    with both ranks' result files written 40 ms before the abort). ``mp.spawn`` reports that
    exit as the rank's failure. Leaving with ``os._exit(0)`` once ``fn`` returned skips the
    finalisation; an exception in ``fn`` still fails the rank as before.
    """
    import os
    import sys

    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def join_gloo(rank: int, world_size: int, port: int) -> None:
    """Join a gloo process group through the store of :func:`rendezvous` at ``port``."""
    from datetime import timedelta

    import torch.distributed as dist

    timeout = timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)


def train_briefly(
    case: str,
    precision: str = "fp32",
    *,
    rank: int = 0,
    world_size: int = 1,
    epochs: int | None = None,
    device: str = "cpu",
    strategy: Strategy | str = Strategy.DDP,
) -> dict[str, Any]:
    """Train ``CASES[case]``; return ``{"epochs": [metrics per epoch], "before": metrics}``."""
    import torch

    from hpsearch.data import load_dataset
    from hpsearch.models import get_family
    from hpsearch.training import make_trainer

    name, dataset, params, n_epochs = CASES[case]
    data = load_dataset(dataset, seed=0)
    family = get_family(name)
    torch.manual_seed(0)
    trainer = make_trainer(
        family,
        family.build(params, data),
        params,
        data,
        device=torch.device(device),
        precision=precision,
        seed=0,
        rank=rank,
        world_size=world_size,
        strategy=strategy,
    )
    out: dict[str, Any] = {"before": trainer.evaluate(data), "epochs": []}
    for epoch in range(1, (n_epochs if epochs is None else epochs) + 1):
        metrics = trainer.train_epoch(data, epoch)
        metrics.update(trainer.evaluate(data))
        out["epochs"].append(metrics)
    out["trainer"] = trainer
    out["data"] = data
    return out


def _checksum(trainer: Any) -> float:
    modules = [getattr(trainer, "gan", None) or getattr(trainer.model, "module", trainer.model)]
    return float(sum(p.detach().double().sum() for m in modules for p in m.parameters()))


def ddp_rank(rank: int, world_size: int, port: int, out_dir: str, cases: list[str]) -> None:
    """One rank: join a gloo group, train every case in ``cases`` for 2 epochs, write results.

    Each rank writes ``rank{N}.json``: per case, the epochs' metrics and a checksum of the
    weights (equal on every rank when DDP kept them in sync).
    """
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    join_gloo(rank, world_size, port)
    try:
        results = {}
        for case in cases:
            run = train_briefly(case, rank=rank, world_size=world_size, epochs=2)
            results[case] = {
                "epochs": [
                    {k: v for k, v in m.items() if isinstance(v, float) and math.isfinite(v)}
                    for m in run["epochs"]
                ],
                "checksum": _checksum(run["trainer"]),
            }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def fsdp_resume_rank(rank: int, world_size: int, port: int, out_dir: str) -> None:
    """One rank of a sharded (fsdp) cnn: 3 epochs straight; then a fresh model for 2 epochs,
    checkpointed after each into ``out_dir/ckpt`` (trial 0); then another fresh model that
    loads that checkpoint and trains epoch 3. Writes ``fsdp-rank{N}.json``: the epoch-3
    metrics of both, the parameter bytes and the epoch loaded."""
    import torch
    import torch.distributed as dist

    from hpsearch.training import ShardedCheckpointStore, param_bytes

    torch.set_num_threads(1)
    join_gloo(rank, world_size, port)
    try:
        kw: dict[str, Any] = {"rank": rank, "world_size": world_size, "strategy": Strategy.FSDP}
        straight = train_briefly("cnn", epochs=3, **kw)
        first = train_briefly("cnn", epochs=0, **kw)
        store = ShardedCheckpointStore(Path(out_dir, "ckpt"), 0, rank=rank, world_size=world_size)
        for epoch in (1, 2):
            first["trainer"].train_epoch(first["data"], epoch)
            state = {"epoch": epoch, "value": 0.0, "trainer": first["trainer"].state_dict()}
            store.save(state, first["trainer"])
        resumed = train_briefly("cnn", epochs=0, **kw)
        meta = store.load_into(resumed["trainer"], resumed=True)
        assert meta is not None
        trainer, data = resumed["trainer"], resumed["data"]
        third = trainer.train_epoch(data, 3)
        third.update(trainer.evaluate(data))
        result = {
            "straight": straight["epochs"][2],
            "straight_epochs": straight["epochs"],
            "resumed": third,
            "loaded_epoch": meta["epoch"],
            "param_bytes": param_bytes([trainer.model]),
        }
        Path(out_dir, f"fsdp-rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


#: A tiny transformer for pipeline checks: (data set, hyperparameters).
PIPELINE_CASE: tuple[Any, dict[str, Any]] = (
    {"name": "python-docs", "max_chars": 20000},
    {
        "lr": 3e-3,
        "width": 32,
        "depth": 2,
        "heads": 4,
        "dropout": 0.0,
        "seq_len": 32,
        "batch_size": 16,
    },
)


def _pipeline_trainer(rank: int, world_size: int, parallel: dict[str, Any] | None) -> Any:
    import torch

    from hpsearch.data import load_dataset
    from hpsearch.models import get_family
    from hpsearch.spec import ParallelSpec
    from hpsearch.training import make_trainer

    dataset, params = PIPELINE_CASE
    data = load_dataset(dataset, seed=0)
    family = get_family("transformer")
    torch.manual_seed(0)
    trainer = make_trainer(
        family,
        family.build(params, data),
        params,
        data,
        device=torch.device("cpu"),
        precision="fp32",
        seed=0,
        rank=rank,
        world_size=world_size,
        parallel=ParallelSpec.model_validate(parallel) if parallel else None,
    )
    return trainer, data


def _epoch(trainer: Any, data: Any, epoch: int) -> dict[str, float]:
    metrics: dict[str, float] = trainer.train_epoch(data, epoch)
    metrics.update(trainer.evaluate(data))
    return metrics


def train_pipeline_case(
    *,
    rank: int = 0,
    world_size: int = 1,
    parallel: dict[str, Any] | None = None,
    epochs: int = 2,
) -> list[dict[str, float]]:
    """Train :data:`PIPELINE_CASE` alone (``parallel`` None) or as this rank of a pipeline
    layout (``{"strategy": "pipeline", "stages": 2, ...}``); the metrics of each epoch."""
    trainer, data = _pipeline_trainer(rank, world_size, parallel)
    return [_epoch(trainer, data, epoch) for epoch in range(1, epochs + 1)]


def pipeline_resume_rank(rank: int, world_size: int, port: int, out_dir: str) -> None:
    """One rank of a 2-stage pipeline: epoch 2 straight, and epoch 2 of a fresh pipeline
    restored from the state after epoch 1 (as a trial resumes from its checkpoint); rank 0
    writes both to ``rank0.json``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    join_gloo(rank, world_size, port)
    layout = {"strategy": "pipeline", "stages": world_size, "microbatches": 2}
    try:
        trainer, data = _pipeline_trainer(rank, world_size, layout)
        _epoch(trainer, data, 1)
        box = [trainer.state_dict()]  # a collective: rank 0 holds every stage's state
        straight = _epoch(trainer, data, 2)
        dist.broadcast_object_list(box, src=0)
        fresh, _ = _pipeline_trainer(rank, world_size, layout)
        fresh.load_state_dict(box[0])
        resumed = _epoch(fresh, data, 2)
        if rank == 0:
            Path(out_dir, "rank0.json").write_text(
                json.dumps({"straight": straight, "resumed": resumed})
            )
    finally:
        dist.destroy_process_group()


def pipeline_rank(
    rank: int, world_size: int, port: int, out_dir: str, layouts: list[dict[str, Any]]
) -> None:
    """One rank: join a gloo group, train :data:`PIPELINE_CASE` in each layout, write
    ``rank{N}.json`` (per layout, the metrics of each epoch)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    join_gloo(rank, world_size, port)
    try:
        results = [
            train_pipeline_case(rank=rank, world_size=world_size, parallel=layout)
            for layout in layouts
        ]
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def fsdp_case_rank(rank: int, world_size: int, port: int, out_dir: str, case: str) -> None:
    """One rank of ``CASES[case]`` trained 2 epochs sharded (fsdp); writes
    ``fsdp-{case}-rank{N}.json``: the metrics of each epoch and this rank's parameter bytes."""
    import torch
    import torch.distributed as dist

    from hpsearch.training import param_bytes

    torch.set_num_threads(1)
    join_gloo(rank, world_size, port)
    try:
        run = train_briefly(
            case, rank=rank, world_size=world_size, epochs=2, strategy=Strategy.FSDP
        )
        result = {"epochs": run["epochs"], "param_bytes": param_bytes([run["trainer"].model])}
        Path(out_dir, f"fsdp-{case}-rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
