"""MIG instances in worker layouts.

A GPU in MIG mode is split into instances that discovery lists as devices of their own,
named by their ``MIG-...`` UUIDs (:class:`~hpsearch.cluster._gpus.GpuInfo`). A process can
use only one MIG instance, so a set on MIG devices is one instance: ``gpus_per_trial`` 1, or
a fraction of one (1/2, 1/4, 1/8) to pack trials on each. Where a list of GPU indices is
given (``cluster.gpus``, ``--gpus``), a GPU in MIG mode stands for its instances.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from hpsearch.cluster._gpus import GpuInfo, _from_nvml
from hpsearch.exceptions import GpuAllocationError
from hpsearch.spec import DeviceId, is_mig


def gpu_devices(
    wanted: Sequence[DeviceId], found: Sequence[GpuInfo] | None = None
) -> list[DeviceId]:
    """The devices of the GPUs in ``wanted``: each index of a GPU in MIG mode replaced by its
    instances' UUIDs (``found``: the inventory, default what NVML lists; without NVML the
    indices stay as they are).

    >>> mig = [GpuInfo(0, "A100 MIG 3g.20gb", 20096, f"MIG-{c}", mig=i) for i, c in enumerate("ab")]
    >>> gpu_devices([1, 0], [*mig, GpuInfo(1, "A100", 40960, "GPU-c")])
    [1, 'MIG-a', 'MIG-b']
    """
    if found is None:
        found = _from_nvml() or []
    out: list[DeviceId] = []
    for device in wanted:
        instances = [g.uuid for g in found if g.mig is not None and g.index == device]
        out.extend(instances or [device])
    return out


def check_mig_sets(devices: Sequence[DeviceId], size: float) -> None:
    """Raise :class:`GpuAllocationError` where sets of ``size`` > 1 would span MIG instances."""
    instances = [d for d in devices if is_mig(d)]
    if size <= 1 or not instances:
        return
    # NVML, asked only for the message, names each instance's GPU.
    parents = {g.uuid: g.index for g in _from_nvml() or [] if g.mig is not None}
    per_gpu = Counter(parents[d] for d in instances if d in parents)
    what = [
        f"GPU {gpu} is split into {n} MIG instance{'s' if n > 1 else ''}"
        for gpu, n in sorted(per_gpu.items())
    ]
    unknown = [str(d) for d in instances if d not in parents]
    if unknown:
        are = "are MIG instances" if len(unknown) > 1 else "is a MIG instance"
        what.append(f"{', '.join(unknown)} {are}")
    raise GpuAllocationError(
        f"gpus_per_trial={size:g}: {' and '.join(what)}, and a process can use only one; "
        "use gpus_per_trial: 1 (or 1/2, 1/4, 1/8 to pack trials on each)",
        needed=int(size),
        found=1,
    )
