"""The environment of worker and rank processes: the one place that names its variables.

A worker's layout (:mod:`hpsearch.cluster._local`, ``hpsearch worker``) writes them with
:func:`worker_env`; the trial runner reads them back as :class:`WorkerDevices`; a worker
starting a rank process for one device writes :func:`rank_env`. Trials of different sizes
on one worker lease their devices through :func:`lease_devices`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpsearch.cluster._gpus import DeviceAllocator

ENV_KIND = "HPSEARCH_DEVICE_KIND"  # "cuda" or "cpu"
ENV_IDS = "HPSEARCH_DEVICE_IDS"  # physical GPU indices, or CPU slot ids: "2,3"
ENV_THREADS = "HPSEARCH_THREADS"  # CPU threads of the whole worker (or of a rank process)
ENV_LEASE = "HPSEARCH_LEASE"  # "1": the worker leases subsets to trials of different sizes


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _threads_env(threads: int) -> dict[str, str]:
    # Dask's Nanny would pin OMP/MKL to 1; a trial's torch uses its share of the cores.
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def worker_env(
    *, kind: str, ids: Sequence[int], threads: int, nthreads: int, lease: bool
) -> dict[str, str]:
    """The environment of a worker that owns ``ids`` and ``threads`` CPU threads and runs
    ``nthreads`` trials at a time."""
    env = {
        ENV_KIND: kind,
        ENV_IDS: ",".join(map(str, ids)),
        ENV_THREADS: str(threads),
        **_threads_env(max(1, threads // max(1, nthreads))),
        "MLFLOW_LOGGING_LEVEL": "WARNING",
        "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning",
    }
    if kind == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))
    if lease:
        env[ENV_LEASE] = "1"
    return env


def rank_env(*, kind: str, device_id: int, threads: int) -> dict[str, str]:
    """What a rank process of one device adds to its worker's environment."""
    env = {ENV_THREADS: str(threads), **_threads_env(threads)}
    if kind == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = str(device_id)
    return env


@dataclass(frozen=True)
class WorkerDevices:
    """The devices a worker owns, from its environment (set by its layout, or by hand)."""

    kind: str  # "cuda" | "cpu"
    ids: tuple[int, ...]  # physical GPU indices, or CPU slot ids
    threads: int  # CPU threads of the whole worker
    lease: bool  # trials of different sizes lease subsets of ``ids``

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerDevices:
        """Read ``HPSEARCH_DEVICE_*``; a plain ``dask worker`` with ``CUDA_VISIBLE_DEVICES``
        works too.

        Example:
            >>> WorkerDevices.from_env({"CUDA_VISIBLE_DEVICES": "2,3", "HPSEARCH_THREADS": "8"})
            WorkerDevices(kind='cuda', ids=(2, 3), threads=8, lease=False)
            >>> WorkerDevices.from_env({}).kind
            'cpu'
        """
        env = os.environ if env is None else env
        visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
        kind = env.get(ENV_KIND) or ("cuda" if visible and visible != "-1" else "cpu")
        raw = env.get(ENV_IDS) or (visible if kind == "cuda" else "0")
        ids = tuple(int(x) for x in raw.split(",") if x.strip().lstrip("-").isdigit())
        return cls(
            kind,
            ids or (0,),
            int(env.get(ENV_THREADS) or cores()),
            env.get(ENV_LEASE) == "1",
        )

    def label(self, ids: Sequence[int]) -> str:
        return ",".join(f"{'cuda' if self.kind == 'cuda' else 'slot'}:{i}" for i in ids)

    def local_device(self, device_id: int) -> str:
        """The torch device of ``device_id`` inside this worker process."""
        if self.kind != "cuda":
            return "cpu"
        return f"cuda:{self.ids.index(device_id)}"

    def rank_threads(self, size: int) -> int:
        """The CPU threads of each process of a trial of ``size`` devices: the whole worker's
        for a trial that has the worker to itself, else a device's share."""
        if size == 1 and not self.lease:
            return self.threads
        return max(1, self.threads // max(1, len(self.ids)))


_allocators: dict[tuple[int, ...], DeviceAllocator] = {}
_allocators_lock = threading.Lock()


def _allocator(devices: WorkerDevices) -> DeviceAllocator:
    """This process's allocator of ``devices`` (one per device set, made on first use)."""
    from hpsearch.cluster._gpus import DeviceAllocator, nvml_links

    with _allocators_lock:
        alloc = _allocators.get(devices.ids)
        if alloc is None:
            links = nvml_links(list(devices.ids)) if devices.kind == "cuda" else None
            alloc = _allocators[devices.ids] = DeviceAllocator(devices.ids, links)
        return alloc


@contextlib.contextmanager
def lease_devices(devices: WorkerDevices, size: int, *, owner: str) -> Iterator[list[int]]:
    """The ``size`` devices a trial runs on, exclusively while the block runs: a leased
    subset on a leasing worker, else the first ``size`` of the worker's own set."""
    if not devices.lease:
        yield list(devices.ids[:size])
        return
    alloc = _allocator(devices)
    ids = alloc.lease(size, owner=owner)
    try:
        yield list(ids)
    finally:
        alloc.release(ids)
