"""Worker layouts, and the embedded default: a local cluster of Nanny worker processes.

Two layouts, both holding the exclusivity invariant (no device in two running trials):

- **one worker per set** (every trial has the same ``gpus_per_trial`` = k): the devices are
  split into sets of k, and each set gets its own worker process, which sees only its set
  (``CUDA_VISIBLE_DEVICES``), advertises ``GPU=k`` (or ``SLOT=k``) and runs one trial at a
  time. The Dask scheduler alone decides placement.
- **one worker per node** (``gpus_per_trial`` is searched, so sizes differ): the worker owns
  all N devices, advertises ``GPU=N`` with N threads, and leases each trial an exclusive
  subset through its :class:`~hpsearch.cluster.DeviceAllocator`. Dask's resource accounting
  keeps the sizes in flight within N; the allocator picks the devices (linked ones first).

A MIG instance is a device of its own, and a set of one (see :mod:`hpsearch.cluster._mig`).

``LocalCluster`` gives every worker the same resources and environment, so the local
cluster is a ``SpecCluster`` whose workers each get their own. Everything listens on
127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dask

from hpsearch.cluster._env import NANNY_CONFIG, cores, worker_env
from hpsearch.cluster._gpus import GpuPlan, plan_sets
from hpsearch.cluster._mig import check_mig_sets
from hpsearch.exceptions import GpuAllocationError
from hpsearch.spec import DeviceId

#: Dask settings of the local cluster (its scheduler, and its nannies, which hand theirs to
#: their worker processes):
#:
#: - a worker that dies fails its task at once (Dask would retry it on other workers up to
#:   3 times): the coordinator counts the losses itself, resumes the trial from its
#:   checkpoint and applies ``search.max_retries``;
#: - no work stealing: it moves queued tasks between workers, but the coordinator submits a
#:   trial only when a set is free for it, so there is nothing to move, and the extension's
#:   bookkeeping of every task (and its rebalancing pass) is work for nothing on the
#:   coordinator's process;
#: - no statistical profiler in the workers: it samples every thread's stack 100 times a
#:   second, for the dashboard's profile page, which a study does not read;
#: - nothing set before a worker process starts (:data:`~hpsearch.cluster._env.NANNY_CONFIG`:
#:   Dask's one thread and malloc trim threshold slow training).
CLUSTER_CONFIG: dict[str, Any] = {
    **NANNY_CONFIG,
    "distributed.scheduler.allowed-failures": 0,
    "distributed.scheduler.work-stealing": False,
    "distributed.worker.profile.enabled": False,
}

if TYPE_CHECKING:
    from distributed import SpecCluster


def _worker(
    name: str,
    *,
    kind: str,
    ids: Sequence[DeviceId],
    threads: int,
    nthreads: int,
    lease: bool,
    resource: str,
    amount: float | None = None,
) -> dict[str, Any]:
    env = worker_env(kind=kind, ids=ids, threads=threads, nthreads=nthreads, lease=lease)
    return {
        "cls": "distributed.Nanny",
        "options": {
            "nthreads": nthreads,
            "resources": {resource: len(ids) if amount is None else amount},
            "env": env,
            "host": "127.0.0.1",
            "dashboard": False,
            "name": name,
            "silence_logs": logging.WARNING,
            "preload": ["hpsearch.preload"],
        },
    }


def worker_specs(
    *,
    gpus: Sequence[DeviceId] | None,
    gpus_per_trial: float,
    mixed_sizes: bool = False,
    n_workers: int | None = None,
    n_slots: int | None = None,
    n_cores: int | None = None,
    links: Mapping[frozenset[DeviceId], int] | None = None,
    prefix: str = "hpsearch",
) -> tuple[dict[str, dict[str, Any]], GpuPlan]:
    """The workers of one node (pure: nothing is started).

    Args:
        gpus: the node's GPU indices and MIG instances' UUIDs, or ``None`` (or empty) for
            CPU slots.
        gpus_per_trial: the set size (the largest size, when ``mixed_sizes``); a fraction
            of one device (1/2, 1/4, 1/8) packs that many workers on each device, each
            advertising that fraction and a share of the cores.
        mixed_sizes: trials of different sizes share the node (one leasing worker).
        n_workers: CPU slots only: how many sets to make (default: as many as fit).
        n_slots: CPU slots only: how many slots the node has (default: one per core).
        n_cores: CPU cores to share out (default: this process's affinity).
        links: GPU link scores for the planner.

    Returns:
        The worker specs by name, and the plan (which sets, which devices left over).

    Example:
        >>> specs, plan = worker_specs(gpus=[0, 1, 2, 3, 4], gpus_per_trial=2, n_cores=10)
        >>> plan.sets, plan.leftover
        (((0, 1), (2, 3)), (4,))
        >>> options = specs["hpsearch-1"]["options"]
        >>> options["env"]["CUDA_VISIBLE_DEVICES"], options["resources"]
        ('2,3', {'GPU': 2})
        >>> specs, plan = worker_specs(gpus=[0], gpus_per_trial=0.25, n_cores=8)
        >>> sorted({(o["options"]["env"]["CUDA_VISIBLE_DEVICES"], o["options"]["resources"]["GPU"])
        ...         for o in specs.values()}), len(specs)
        ([('0', 0.25)], 4)
    """
    n_cores = n_cores or cores()
    check_mig_sets(gpus or (), gpus_per_trial)
    if gpus_per_trial < 1:
        packed = _packed_plan(gpus, gpus_per_trial, n_workers=n_workers, n_slots=n_slots or n_cores)
        return _set_workers(packed, n_cores=n_cores, prefix=prefix, amount=gpus_per_trial), packed
    size = int(gpus_per_trial)
    devices = _devices(
        gpus, size, mixed_sizes=mixed_sizes, n_workers=n_workers, n_slots=n_slots, n_cores=n_cores
    )
    _check_set_fits(size, devices, on_gpus=bool(gpus))
    if mixed_sizes:
        return _leasing_worker(devices, on_gpus=bool(gpus), n_cores=n_cores, prefix=prefix)
    plan = _sets_plan(devices, size, on_gpus=bool(gpus), n_workers=n_workers, links=links)
    return _set_workers(plan, n_cores=n_cores, prefix=prefix), plan


def _devices(
    gpus: Sequence[DeviceId] | None,
    size: int,
    *,
    mixed_sizes: bool,
    n_workers: int | None,
    n_slots: int | None,
    n_cores: int,
) -> list[DeviceId]:
    """The node's devices: its GPUs and MIG instances, else CPU slots numbered from 0 (as
    many as ``n_slots``; else as ``n_workers`` sets of ``size`` need, unless sizes are
    mixed; else one per core)."""
    if gpus:
        return list(gpus)
    slots = n_slots or (n_workers * size if n_workers and not mixed_sizes else n_cores)
    return list(range(slots))


def _check_set_fits(size: int, devices: Sequence[DeviceId], *, on_gpus: bool) -> None:
    """A set of ``size`` fits the node's ``devices`` (else GpuAllocationError, with both
    numbers)."""
    if size > len(devices):
        what = "GPUs" if on_gpus else "CPU slots"
        raise GpuAllocationError(
            f"a trial needs gpus_per_trial={size} {what} but this node has {len(devices)}",
            needed=size,
            found=len(devices),
        )


def _leasing_worker(
    devices: Sequence[DeviceId], *, on_gpus: bool, n_cores: int, prefix: str
) -> tuple[dict[str, dict[str, Any]], GpuPlan]:
    """One worker that owns all ``devices`` and every core, one thread per device, and
    leases each trial its subset (trials of mixed sizes); its plan is one set of them all."""
    kind, resource = ("cuda", "GPU") if on_gpus else ("cpu", "SLOT")
    plan = GpuPlan(len(devices), (tuple(devices),), kind="GPU" if on_gpus else "CPU slot")
    name = f"{prefix}-0"
    worker = _worker(
        name,
        kind=kind,
        ids=devices,
        threads=n_cores,
        nthreads=len(devices),
        lease=True,
        resource=resource,
    )
    return {name: worker}, plan


def _sets_plan(
    devices: Sequence[DeviceId],
    size: int,
    *,
    on_gpus: bool,
    n_workers: int | None,
    links: Mapping[frozenset[DeviceId], int] | None,
) -> GpuPlan:
    """``devices`` cut into sets of ``size`` (GPUs by their links). CPU slots: at most
    ``n_workers`` sets, the slots of the others left over."""
    plan = plan_sets(devices, size, links=links if on_gpus else None)
    if on_gpus:
        return plan
    if n_workers:
        plan = GpuPlan(
            plan.size,
            plan.sets[:n_workers],
            plan.leftover + tuple(d for s in plan.sets[n_workers:] for d in s),
        )
    return dataclasses.replace(plan, kind="CPU slot")


def _set_workers(
    plan: GpuPlan, *, n_cores: int, prefix: str, amount: float | None = None
) -> dict[str, dict[str, Any]]:
    """One worker per set of ``plan``, one trial at a time, the cores shared out equally;
    each advertises its set's devices, or ``amount`` of its device where trials are packed."""
    kind, resource = ("cuda", "GPU") if plan.kind == "GPU" else ("cpu", "SLOT")
    threads = max(1, n_cores // max(1, len(plan.sets)))
    return {
        f"{prefix}-{i}": _worker(
            f"{prefix}-{i}",
            kind=kind,
            ids=ids,
            threads=threads,
            nthreads=1,
            lease=False,
            resource=resource,
            amount=amount,
        )
        for i, ids in enumerate(plan.sets)
    }


def _packed_plan(
    gpus: Sequence[DeviceId] | None, fraction: float, *, n_workers: int | None, n_slots: int
) -> GpuPlan:
    """``1 / fraction`` sets on each device, each that device alone: its workers advertise
    ``fraction`` of it (Dask's resources add up to the whole device), and each trial caps
    itself to its fraction of the device's memory."""
    packed = round(1 / fraction)
    devices: list[DeviceId] = list(gpus) if gpus else list(range(n_slots))
    sets = tuple((d,) for d in devices for _ in range(packed))[:n_workers]
    return GpuPlan(1, sets, kind="GPU" if gpus else "CPU slot", packed=packed)


def start_local_cluster(
    *,
    gpus: Sequence[DeviceId] | None = None,
    gpus_per_trial: float = 1,
    mixed_sizes: bool = False,
    n_workers: int | None = None,
    n_slots: int | None = None,
    links: Mapping[frozenset[DeviceId], int] | None = None,
    dashboard: bool = False,
    security: Any = None,
) -> SpecCluster:
    """Start a local cluster of worker processes on 127.0.0.1 (one per set, or one leasing)."""
    import importlib.util

    from distributed import Nanny, Scheduler, SpecCluster

    workers, plan = worker_specs(
        gpus=gpus,
        gpus_per_trial=gpus_per_trial,
        mixed_sizes=mixed_sizes,
        n_workers=n_workers,
        n_slots=n_slots,
        links=links,
    )
    if plan.leftover:
        logging.getLogger(__name__).warning("%s", plan.describe())
    protocol = "tls://" if security is not None else "tcp://"
    for spec in workers.values():
        spec["cls"] = Nanny
        if security is not None:
            spec["options"].update(security=security, protocol=protocol)
    with_dashboard = dashboard and importlib.util.find_spec("bokeh") is not None
    scheduler = {
        "cls": Scheduler,
        "options": {
            "host": "127.0.0.1",
            "port": 0,
            "dashboard": with_dashboard,
            "dashboard_address": "127.0.0.1:0",  # its HTTP server (health, metrics) too
            **({"security": security, "protocol": protocol} if security is not None else {}),
        },
    }
    with dask.config.set(CLUSTER_CONFIG):
        cluster = SpecCluster(
            workers=workers,
            scheduler=scheduler,
            silence_logs=logging.WARNING,
            name="hpsearch",
            security=security,
        )
    cluster.hpsearch_plan = plan  # type: ignore[attr-defined]
    return cluster
