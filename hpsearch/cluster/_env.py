"""The environment of worker and rank processes: the one place that names its variables.

A worker's layout (:mod:`hpsearch.cluster._local`, ``hpsearch worker``) writes them with
:func:`worker_env`; the trial runner reads them back as :class:`WorkerDevices`; a worker
starting a rank process for one device writes :func:`rank_env`. Trials of different sizes
on one worker lease their devices through :func:`lease_devices`.

A trial's code runs as fast in a worker or a rank process as in a bare Python process with
the same threads. Each choice that makes it so, and why:

- **Threads.** ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` are the
  process's share of the cores (its set's, or the whole worker's for a trial that has the
  worker to itself), and the trial runner calls ``torch.set_num_threads`` with the same
  count. Dask's nanny would pin all three to 1, and would set them in the *starting*
  process too (``distributed.nanny.pre-spawn-environ``): :data:`NANNY_CONFIG` keeps it
  from doing either.
- **The allocator.** Dask's nanny also starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``
  so that freed memory goes back to the OS at once. Setting any of glibc's malloc
  thresholds turns off its dynamic mmap threshold: every tensor of more than 128 KiB is
  then mapped and unmapped again, with page faults on each use, and a CNN's epoch loop
  took 1.8x as long. :data:`NANNY_CONFIG` removes the variable, and every training process
  calls :func:`tune_allocator` as it starts, which sets the thresholds glibc's own dynamic
  rule reaches (mmap above 32 MiB, trim above 64 MiB) whatever the environment said, so a
  user's Dask config or shell cannot bring the slow setting back. What Dask's trimming was
  for, memory handed back between tasks, is :func:`release_memory` after each trial: one
  ``malloc_trim`` when a trial ends instead of an unmap on every ``free``.
  ``HPSEARCH_MALLOC=keep`` leaves glibc as the environment set it (to compare).
- **Affinity.** None is set: a CPU slot is a count of cores, not a pinned core. A worker's
  own threads (Dask's event loop, the MLflow writer, the gRPC client) and, on the local
  cluster, the coordinator share the cores with the trials; pinned trials would queue
  behind them on one core while another sits idle. GPU sets are pinned by
  ``CUDA_VISIBLE_DEVICES`` (:func:`cuda_visible_devices`: GPU indices, or a MIG instance's
  UUID; the process then sees its devices as ``cuda:0``, ``cuda:1`` ...).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpsearch.exceptions import GpuAllocationError
from hpsearch.spec import DeviceId, is_mig, parse_device

if TYPE_CHECKING:
    from hpsearch.cluster._gpus import DeviceAllocator

ENV_KIND = "HPSEARCH_DEVICE_KIND"  # "cuda" or "cpu"
ENV_IDS = "HPSEARCH_DEVICE_IDS"  # physical GPU indices, MIG UUIDs, or CPU slot ids: "2,3"
ENV_THREADS = "HPSEARCH_THREADS"  # CPU threads of the whole worker (or of a rank process)
ENV_LEASE = "HPSEARCH_LEASE"  # "1": the worker leases subsets to trials of different sizes
ENV_MALLOC = "HPSEARCH_MALLOC"  # "keep": leave glibc's malloc as the environment set it

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: glibc's malloc tunables: any one of them set turns off its dynamic mmap threshold.
MALLOC_VARS = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)

#: Dask settings for every nanny hpsearch starts (the local cluster, ``hpsearch worker``,
#: SLURM jobs and pods): nothing set before a worker process starts, so neither the worker
#: nor the process that starts it gets Dask's one thread or its malloc trim threshold.
#: The worker's own environment (:func:`worker_env`) sets the threads.
NANNY_CONFIG: dict[str, object] = {
    f"distributed.nanny.pre-spawn-environ.{name}": None for name in (*_THREAD_VARS, *MALLOC_VARS)
}

# mallopt(3) parameters, and the values glibc's dynamic threshold reaches on 64-bit Linux
# (DEFAULT_MMAP_THRESHOLD_MAX; the trim threshold follows at twice the mmap threshold).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _threads_env(threads: int) -> dict[str, str]:
    return dict.fromkeys(_THREAD_VARS, str(threads))


def _libc() -> ctypes.CDLL | None:
    """glibc, or ``None`` elsewhere (macOS, musl: their allocators have no such switch)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc's own symbol: not glibc, not ours to tune
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator(env: Mapping[str, str] | None = None) -> bool:
    """Set glibc malloc's mmap and trim thresholds for training (see the module's notes).

    Returns whether they were set: not on a system without glibc, nor with
    ``HPSEARCH_MALLOC=keep``.
    """
    env = os.environ if env is None else env
    libc = _libc()
    if libc is None or env.get(ENV_MALLOC) == "keep":
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


_last_release = 0.0


def release_memory(*, min_interval_s: float = 1.0) -> bool:
    """Hand the memory a finished trial freed back to the OS (``malloc_trim``), at most once
    every ``min_interval_s``: short trials ending many times a second trim once."""
    global _last_release
    now = time.monotonic()
    if now - _last_release < min_interval_s or os.environ.get(ENV_MALLOC) == "keep":
        return False
    libc = _libc()
    if libc is None:
        return False
    _last_release = now
    libc.malloc_trim(0)
    return True


def cuda_visible_devices(ids: Sequence[DeviceId]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a process of the GPUs ``ids``: their indices, or the UUID
    of a MIG instance, which goes alone (CUDA gives a process one MIG instance at most).

    >>> cuda_visible_devices([2, 3]), cuda_visible_devices(["MIG-4f1c"])
    ('2,3', 'MIG-4f1c')
    """
    if len(ids) > 1 and any(is_mig(d) for d in ids):
        raise GpuAllocationError(
            f"devices {','.join(map(str, ids))}: a process can use only one MIG instance",
            needed=len(ids),
            found=1,
        )
    return ",".join(map(str, ids))


def worker_env(
    *, kind: str, ids: Sequence[DeviceId], threads: int, nthreads: int, lease: bool
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
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(ids)
    if lease:
        env[ENV_LEASE] = "1"
    return env


def rank_env(*, kind: str, device_id: DeviceId, threads: int) -> dict[str, str]:
    """What a rank process of one device adds to its worker's environment."""
    env = {ENV_THREADS: str(threads), **_threads_env(threads)}
    if kind == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices([device_id])
    return env


@dataclass(frozen=True)
class WorkerDevices:
    """The devices a worker owns, from its environment (set by its layout, or by hand)."""

    kind: str  # "cuda" | "cpu"
    ids: tuple[DeviceId, ...]  # physical GPU indices or MIG UUIDs, or CPU slot ids
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
        ids = tuple(d for d in map(parse_device, raw.split(",")) if d is not None)
        return cls(
            kind,
            ids or (0,),
            int(env.get(ENV_THREADS) or cores()),
            env.get(ENV_LEASE) == "1",
        )

    def label(self, ids: Sequence[DeviceId]) -> str:
        return ",".join(f"{'cuda' if self.kind == 'cuda' else 'slot'}:{i}" for i in ids)

    def local_device(self, device_id: DeviceId) -> str:
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


_allocators: dict[tuple[DeviceId, ...], DeviceAllocator] = {}
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
def lease_devices(devices: WorkerDevices, size: int, *, owner: str) -> Iterator[list[DeviceId]]:
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
