"""This node's Dask workers, one per device set, joining an existing scheduler: what
``hpsearch worker`` and ``python -m hpsearch.cluster.jobqueue_worker`` (a SLURM job) start.
"""

from __future__ import annotations

import contextlib
import signal
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import ClusterError

if TYPE_CHECKING:
    from hpsearch.cluster._gpus import GpuPlan
    from hpsearch.spec import DeviceId


def node_workers(
    scheduler: str,
    *,
    gpus: str = "auto",
    gpus_per_trial: str = "1",
    mixed_sizes: bool = False,
    slots: int | None = None,
    host: str | None = None,
    name: str | None = None,
    tls: tuple[str, str, str] | None = None,
) -> tuple[dict[str, Any], GpuPlan, list[DeviceId] | None]:
    """The specs of this node's workers (one per device set), their plan and the devices.

    Args:
        scheduler: the address of the Dask scheduler they join.
        gpus: ``auto``, ``none``, or a list such as ``0,1,2,3`` (indices, MIG UUIDs).
        gpus_per_trial: the size of each worker's set, or ``1/2``, ``1/4``, ``1/8``.
        mixed_sizes: one worker owning all devices, leasing subsets to trials.
        slots: CPU slots where the node has no GPUs (default: one per core).
        host: the interface they listen on (default: 127.0.0.1 for a local scheduler).
        name: the prefix of their names (default: the host name).
        tls: the CA certificate, this node's certificate and its key.

    Raises:
        HpsearchError: a value that cannot be used (one line).
    """
    import socket
    from types import SimpleNamespace

    from hpsearch.cluster._base import security as make_security
    from hpsearch.cluster._gpus import device_count, discover_gpus, nvml_links
    from hpsearch.cluster._local import worker_specs
    from hpsearch.cluster._mig import gpu_devices
    from hpsearch.spec import parse_device

    size = device_count(gpus_per_trial)
    devices: list[DeviceId] | None
    if gpus == "none":
        devices = None
    elif gpus == "auto":
        devices = [g.device for g in discover_gpus()] or None
    else:
        listed = [parse_device(x) for x in gpus.split(",") if x.strip()]
        if None in listed:
            raise ClusterError(
                f"--gpus: expected auto, none or a list such as 0,1,2,3, got {gpus!r}"
            )
        devices = gpu_devices([d for d in listed if d is not None])
    specs, plan = worker_specs(
        gpus=devices,
        gpus_per_trial=size,
        mixed_sizes=mixed_sizes,
        n_slots=slots,
        links=nvml_links(devices) if devices else None,
        prefix=name or socket.gethostname(),
    )
    local = any(h in scheduler for h in ("127.0.0.1", "localhost", "[::1]"))
    security = None
    if tls is not None:
        ca_file, cert, key = tls
        security = make_security(SimpleNamespace(ca_file=ca_file, cert=cert, key=key))
    for spec in specs.values():
        spec["options"]["host"] = host or ("127.0.0.1" if local else None)
        if security is not None:
            spec["options"]["security"] = security
    return specs, plan, devices


def serve_workers(scheduler: str, specs: dict[str, Any]) -> None:
    """Run the workers ``specs`` describes until they end or this process is asked to stop
    (SIGINT, SIGTERM); SLURM's warning (SIGUSR1) is passed on to each worker."""
    import asyncio

    asyncio.run(_serve(scheduler, specs))


def _forward(nannies: list[Any], signum: int) -> None:
    """Send ``signum`` to each nanny's worker process."""
    import os

    for nanny in nannies:
        process = getattr(getattr(nanny, "process", None), "process", None)
        pid = getattr(process, "pid", None)
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signum)


async def _serve(scheduler: str, specs: dict[str, Any]) -> None:
    import asyncio

    import dask
    from distributed import Nanny

    from hpsearch.cluster._env import NANNY_CONFIG

    with dask.config.set(NANNY_CONFIG):  # the nanny reads it as it is made
        nannies = [Nanny(scheduler, **spec["options"]) for spec in specs.values()]
    await asyncio.gather(*nannies)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # SLURM's warning before a job ends (--signal=B:USR1@N): each worker's trials checkpoint
    # and yield (see hpsearch.preload), and the workers retire.
    loop.add_signal_handler(signal.SIGUSR1, lambda: _forward(nannies, signal.SIGUSR1))
    finished = asyncio.ensure_future(asyncio.gather(*(n.finished() for n in nannies)))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([finished, stopped], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(*(n.close(timeout=20) for n in nannies), return_exceptions=True)
