"""GPU inventory and GPU sets.

Discovery never initialises CUDA in the coordinator (a process that touched CUDA cannot
fork cleanly, and it would hold a context on every GPU): it asks NVML (``nvidia-ml-py``)
first, then ``nvidia-smi``, then torch in a subprocess. ``CUDA_VISIBLE_DEVICES`` is
honoured: only the GPUs it lists are seen, in its order.

A GPU in MIG mode is not one device but its MIG instances, each a device of its own (named
by its ``MIG-...`` UUID, with its own memory). CUDA gives a process one MIG instance at most,
so a set on MIG devices is one instance; trials may still pack onto it (1/2, 1/4, 1/8).
Only NVML lists MIG instances.

The planner is pure: an inventory and a set size in, exclusive sets out, preferring GPUs
that share a fast link when the topology is known. GPUs that do not fill a set are
returned as ``leftover`` (and reported), never silently dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpsearch.exceptions import GpuAllocationError
from hpsearch.spec import DeviceId


@dataclass(frozen=True)
class GpuInfo:
    """One device as discovery found it: a whole GPU (``index`` is the physical index CUDA
    uses), or one MIG instance of GPU ``index`` (``mig`` is its slot there, ``uuid`` its
    ``MIG-...`` UUID and ``memory_mib`` its own memory)."""

    index: int
    name: str
    memory_mib: int
    uuid: str = ""
    mig: int | None = None

    @property
    def device(self) -> DeviceId:
        """How worker layouts name it: the GPU's index, or the MIG instance's UUID."""
        return self.uuid if self.mig is not None else self.index


@dataclass(frozen=True)
class GpuPlan:
    """Exclusive GPU sets of one size, and the GPUs left over."""

    size: int
    sets: tuple[tuple[DeviceId, ...], ...]
    leftover: tuple[DeviceId, ...] = ()
    #: What the sets are of: ``GPU``, or ``CPU slot`` on a machine without GPUs.
    kind: str = "GPU"
    #: Trials that share one device (``gpus_per_trial`` 1/2, 1/4, 1/8): each set is then one
    #: device, listed once per trial it takes.
    packed: int = 1

    def describe(self) -> str:
        if self.packed > 1:
            devices = list(dict.fromkeys(s[0] for s in self.sets))
            return (
                f"{len(devices)} {self.kind}(s), {self.packed} trials on each "
                f"(1/{self.packed} of it per trial): " + " ".join(f"[{d}]" for d in devices)
            )
        text = f"{len(self.sets)} {self.kind} set(s) of {self.size}: " + " ".join(
            "[" + ",".join(map(str, s)) + "]" for s in self.sets
        )
        if self.leftover:
            text += f"; left over (fill no set of {self.size}): " + ",".join(
                map(str, self.leftover)
            )
        return text


# ----------------------------------------------------------------------------- discovery


def _visible_filter(gpus: list[GpuInfo], visible: str | None) -> list[GpuInfo]:
    """Keep and order the GPUs named by ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs); the
    index of a GPU in MIG mode keeps its instances."""
    if visible is None:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    out: list[GpuInfo] = []
    for w in wanted:
        if w.isdigit():
            match = [g for g in gpus if g.index == int(w)]
        else:
            match = [g for g in gpus if g.uuid and g.uuid.startswith(w)][:1]
        if not match:
            break  # CUDA stops at the first invalid entry
        out.extend(match)
    return out


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    """NVML initialised for the block, or ``None`` where nvidia-ml-py or the driver is missing."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _mig_enabled(pynvml: Any, handle: Any) -> bool:
    """Whether the GPU is in MIG mode now (a GPU without MIG says NotSupported)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError, AttributeError):  # AttributeError: an nvidia-ml-py before MIG
        return False
    return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)


def _mig_instances(pynvml: Any, handle: Any, index: int, name: str) -> list[GpuInfo]:
    """The MIG instances of GPU ``index``, each a device of its own (empty slots skipped)."""
    found = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        try:
            mig_name = _text(pynvml.nvmlDeviceGetName(mig))
        except pynvml.NVMLError:
            mig_name = f"{name} MIG"
        mem = pynvml.nvmlDeviceGetMemoryInfo(mig).total // (1024 * 1024)
        uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        found.append(GpuInfo(index, mig_name, int(mem), uuid, mig=slot))
    return found


def _from_nvml() -> list[GpuInfo] | None:
    with _nvml() as pynvml:
        if pynvml is None:
            return None
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(pynvml.nvmlDeviceGetName(h))
            if _mig_enabled(pynvml, h):
                gpus.extend(_mig_instances(pynvml, h, i, name))
                continue
            uuid = _text(pynvml.nvmlDeviceGetUUID(h))
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            gpus.append(GpuInfo(i, name, int(mem), uuid))
        return gpus


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits``.

    Example:
        >>> text = "0, NVIDIA H200, 143771, GPU-aa\\n1, NVIDIA H200, 143771, GPU-bb\\n"
        >>> parse_nvidia_smi(text)[1]
        GpuInfo(index=1, name='NVIDIA H200', memory_mib=143771, uuid='GPU-bb', mig=None)
    """
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            gpus.append(
                GpuInfo(
                    int(parts[0]),
                    parts[1],
                    int(float(parts[2])),
                    parts[3] if len(parts) > 3 else "",
                )
            )
    return gpus


def _from_nvidia_smi() -> list[GpuInfo] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(out)


_TORCH_PROBE = """
import json, torch
out = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append([i, p.name, p.total_memory // (1024 * 1024), str(getattr(p, "uuid", ""))])
print(json.dumps(out))
"""


def _from_torch_subprocess() -> list[GpuInfo]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", _TORCH_PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=True,
        ).stdout
        return [
            GpuInfo(int(i), n, int(m), u) for i, n, m, u in json.loads(out.strip().splitlines()[-1])
        ]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []


def discover_gpus(*, visible: str | None = None, use_env: bool = True) -> list[GpuInfo]:
    """The GPUs this machine has, as CUDA would see them under ``CUDA_VISIBLE_DEVICES``."""
    if use_env and visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    for probe in (_from_nvml, _from_nvidia_smi):
        found = probe()
        if found is not None:
            return _visible_filter(found, visible)
    if not any(
        os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia")
    ):
        return []  # no NVIDIA driver here: do not pay for importing torch to find out
    return _visible_filter(_from_torch_subprocess(), visible)


def nvml_links(devices: Sequence[DeviceId]) -> dict[frozenset[DeviceId], int] | None:
    """Link scores between GPU pairs from NVML's topology (higher is faster), or ``None``.

    NVLink between a pair scores 100 plus its link count; otherwise the common ancestor
    decides (same board 50, same PCIe switch 40, same host bridge 30, same CPU 20, across
    CPUs 10). MIG instances have no links: a set on them is one instance, so they are left
    out (the planner takes an unscored pair as unlinked).
    """
    indices = [d for d in devices if isinstance(d, int)]
    with _nvml() as pynvml:
        if pynvml is None:
            return None
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        ancestor_score = {
            getattr(pynvml, "NVML_TOPOLOGY_INTERNAL", 0): 50,
            getattr(pynvml, "NVML_TOPOLOGY_SINGLE", 10): 40,
            getattr(pynvml, "NVML_TOPOLOGY_MULTIPLE", 20): 35,
            getattr(pynvml, "NVML_TOPOLOGY_HOSTBRIDGE", 30): 30,
            getattr(pynvml, "NVML_TOPOLOGY_NODE", 40): 20,
            getattr(pynvml, "NVML_TOPOLOGY_SYSTEM", 50): 10,
        }
        scores: dict[frozenset[DeviceId], int] = {}
        for a in indices:
            nvlinks: dict[str, int] = {}
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(handles[a], link):
                        peer = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handles[a], link).busId
                        nvlinks[str(peer)] = nvlinks.get(str(peer), 0) + 1
                except Exception:
                    break
            for b in indices:
                if b <= a:
                    continue
                bus_b = str(pynvml.nvmlDeviceGetPciInfo(handles[b]).busId)
                if nvlinks.get(bus_b):
                    scores[frozenset((a, b))] = 100 + nvlinks[bus_b]
                    continue
                try:
                    level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                    scores[frozenset((a, b))] = ancestor_score.get(level, 10)
                except Exception:
                    scores[frozenset((a, b))] = 10
        return scores


# ----------------------------------------------------------------------------- planning


def device_count(text: str | float, option: str = "--gpus-per-trial") -> float:
    """A device count from a command line: a whole number >= 1, or 1/2, 1/4, 1/8 of one.

    >>> device_count("1/4"), device_count("2"), device_count(0.5)
    (0.25, 2.0, 0.5)
    """
    from hpsearch.spec import DEVICE_FRACTIONS
    from hpsearch.spec import device_count as parse

    value = parse(text)
    if value is None:
        raise GpuAllocationError(
            f"{option}: expected a whole number >= 1 or a fraction of one device "
            f"({', '.join(DEVICE_FRACTIONS)}), got {text!r}"
        )
    return float(value)


def plan_sets(
    devices: Sequence[DeviceId],
    size: int,
    *,
    links: Mapping[frozenset[DeviceId], int] | None = None,
) -> GpuPlan:
    """Split ``devices`` into exclusive sets of ``size``, best-linked first.

    Greedy: each set starts from the lowest free device whose best link is strongest, and
    grows by the free device with the strongest total link to the set (ties: the lower
    index). Without ``links`` this is plain consecutive chunks in inventory order.

    Example:
        >>> plan_sets([0, 1, 2, 3, 4], 2).sets, plan_sets([0, 1, 2, 3, 4], 2).leftover
        (((0, 1), (2, 3)), (4,))
        >>> nvlink = {frozenset((0, 2)): 118, frozenset((1, 3)): 118}
        >>> plan_sets([0, 1, 2, 3], 2, links=nvlink).sets
        ((0, 2), (1, 3))
    """
    if size < 1:
        raise GpuAllocationError(f"gpus_per_trial must be >= 1, got {size}", needed=size)
    if len(set(devices)) != len(devices):
        raise GpuAllocationError(f"the GPU list names a device twice: {list(devices)}")
    free = list(devices)
    if not links:
        n = len(free) // size
        sets = tuple(tuple(free[i * size : (i + 1) * size]) for i in range(n))
        return GpuPlan(size, sets, tuple(free[n * size :]))

    def link(a: DeviceId, b: DeviceId) -> int:
        return links.get(frozenset((a, b)), 0)

    sets_list: list[tuple[DeviceId, ...]] = []
    while len(free) >= size:
        if size == 1:
            first = free[0]
        else:
            first = max(
                free,
                key=lambda d: (
                    max((link(d, o) for o in free if o != d), default=0),
                    -free.index(d),
                ),
            )
        chosen = [first]
        while len(chosen) < size:
            rest = [d for d in free if d not in chosen]
            chosen.append(
                max(rest, key=lambda d: (sum(link(d, c) for c in chosen), -free.index(d)))
            )
        sets_list.append(tuple(sorted(chosen, key=free.index)))
        free = [d for d in free if d not in chosen]
    return GpuPlan(size, tuple(sets_list), tuple(free))


@dataclass
class DeviceAllocator:
    """Leases exclusive subsets of one worker's devices to concurrent trials.

    Used where one worker owns all of a node's devices and trials of different sizes share
    them (``gpus_per_trial`` searched). Dask's resource accounting already guarantees that
    the sizes in flight fit; the allocator picks which devices, preferring linked ones, and
    guarantees that no device is leased twice. Thread-safe (trials run in worker threads).
    """

    devices: tuple[DeviceId, ...]
    links: Mapping[frozenset[DeviceId], int] | None = None
    leased: dict[DeviceId, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import threading

        self._lock = threading.Lock()

    def lease(self, size: int, owner: str) -> tuple[DeviceId, ...]:
        with self._lock:
            free = [d for d in self.devices if d not in self.leased]
            if size > len(free):
                raise GpuAllocationError(
                    f"{owner} needs {size} device(s) but only {len(free)} "
                    f"of {len(self.devices)} are free",
                    needed=size,
                    found=len(free),
                )
            chosen = plan_sets(free, size, links=self.links).sets[0]
            for d in chosen:
                self.leased[d] = owner
            return chosen

    def release(self, devices: Sequence[DeviceId]) -> None:
        with self._lock:
            for d in devices:
                self.leased.pop(d, None)
