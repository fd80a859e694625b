"""``hpsearch worker``: this node's Dask workers, joining an existing scheduler."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any

import typer

from hpsearch.cli._common import _console, _user_error


def worker(
    scheduler: str = typer.Argument(
        ..., help="Address of the Dask scheduler to join, e.g. tcp://10.0.0.1:8786."
    ),
    gpus: str = typer.Option(
        "auto",
        "--gpus",
        help="GPUs of this node: auto, none, or a list such as 0,1,2,3 (GPU indices, MIG "
        "instances' UUIDs; a GPU in MIG mode stands for its instances).",
    ),
    gpus_per_trial: str = typer.Option(
        "1",
        "--gpus-per-trial",
        help="Size of each worker's GPU set (one worker per set), or 1/2, 1/4, 1/8: that "
        "many workers share each device.",
    ),
    mixed_sizes: bool = typer.Option(
        False,
        "--mixed-sizes",
        help="One worker owning all devices, leasing subsets to trials of different sizes.",
    ),
    slots: int | None = typer.Option(
        None, "--slots", help="CPU slots where the node has no GPUs (default: one per core)."
    ),
    host: str | None = typer.Option(
        None,
        "--host",
        help="Interface the workers listen on "
        "(default: 127.0.0.1 for a local scheduler, else all).",
    ),
    name: str | None = typer.Option(
        None, "--name", help="Prefix of the worker names (default: the host name)."
    ),
    tls_ca_file: Path | None = typer.Option(
        None, "--tls-ca-file", help="TLS: the CA certificate (with --tls-cert and --tls-key)."
    ),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="TLS: this node's certificate."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="TLS: its private key."),
) -> None:
    """Start this node's workers, one per GPU set, and join an existing scheduler."""
    import asyncio
    import socket

    from hpsearch._devices import DeviceId, parse_device
    from hpsearch.cluster import discover_gpus, nvml_links, worker_specs
    from hpsearch.cluster._gpus import device_count
    from hpsearch.cluster._mig import gpu_devices
    from hpsearch.exceptions import HpsearchError

    try:
        size = device_count(gpus_per_trial)
        devices: list[DeviceId] | None
        if gpus == "none":
            devices = None
        elif gpus == "auto":
            devices = [g.device for g in discover_gpus()] or None
        else:
            listed = [parse_device(x) for x in gpus.split(",") if x.strip()]
            if None in listed:
                raise _user_error(
                    ValueError(
                        f"--gpus: expected auto, none or a list such as 0,1,2,3, got {gpus!r}"
                    )
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
    except HpsearchError as exc:
        raise _user_error(exc) from None
    local = any(h in scheduler for h in ("127.0.0.1", "localhost", "[::1]"))
    console = _console()
    what = "GPU" if devices else "CPU slot"
    console.print(
        f"[bold]{len(specs)}[/] worker(s) joining {scheduler}: "
        f"{plan.describe().replace('GPU set', what + ' set')}"
    )
    given = [p for p in (tls_ca_file, tls_cert, tls_key) if p is not None]
    if given and len(given) != 3:
        raise _user_error(ValueError("--tls-ca-file, --tls-cert and --tls-key go together"))
    security = None
    if given:
        from types import SimpleNamespace

        from hpsearch.cluster._base import security as make_security

        security = make_security(
            SimpleNamespace(ca_file=str(tls_ca_file), cert=str(tls_cert), key=str(tls_key))
        )
    for spec in specs.values():
        spec["options"]["host"] = host or ("127.0.0.1" if local else None)
        if security is not None:
            spec["options"]["security"] = security
    asyncio.run(_serve_workers(scheduler, specs))


def _forward(nannies: list[Any], signum: int) -> None:
    """Send ``signum`` to each nanny's worker process."""
    import os

    for nanny in nannies:
        process = getattr(getattr(nanny, "process", None), "process", None)
        pid = getattr(process, "pid", None)
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signum)


async def _serve_workers(scheduler: str, specs: dict[str, Any]) -> None:
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
