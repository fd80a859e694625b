"""The process behind ``hpsearch pool start``: a Dask scheduler with the pool's arbiter, this
machine's workers (one per device set), and a file that tells the other commands where it is.

Run as ``python -m hpsearch.cluster.pool._serve --dir DIR ...``; it runs until SIGTERM or SIGINT
(``hpsearch pool stop``), then closes its workers and removes the file. ``--no-arbiter``
leaves the arbiter out (a plain Dask scheduler, for comparisons: ``benchmarks/sharing.py``).
The scheduler's HTTP server listens on ``--metrics-port``: its ``/metrics`` serves Dask's
series and the pool's (:mod:`hpsearch.cluster.pool._metrics`); the file says where.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

#: The file in the pool's folder that says where the pool is (written once it runs).
POOL_FILE = "pool.json"
#: The port of the scheduler's HTTP server, where ``/metrics`` is (Dask's dashboard port; one
#: taken: Dask picks a free one, and the pool's file says which).
DEFAULT_METRICS_PORT = 8787
#: Where ``hpsearch pool`` keeps its file unless told otherwise (``--dir``).
DEFAULT_DIR = Path(os.environ.get("HPSEARCH_POOL_DIR", "~/.hpsearch/pool")).expanduser()


def read_pool(folder: Path) -> dict[str, Any] | None:
    """The running pool's file in ``folder``, or ``None`` when none runs there."""
    try:
        info: dict[str, Any] = json.loads((folder / POOL_FILE).read_text())
    except (OSError, ValueError):
        return None
    try:
        os.kill(int(info["pid"]), 0)
    except (OSError, KeyError, ValueError):
        return None  # left by a pool that was killed
    return info


async def serve(args: argparse.Namespace) -> None:
    import dask
    from distributed import Nanny, Scheduler

    from hpsearch.cluster import worker_specs
    from hpsearch.cluster._local import CLUSTER_CONFIG
    from hpsearch.cluster._mig import gpu_devices
    from hpsearch.cluster.pool._extension import PoolArbiter, metrics_url
    from hpsearch.spec import parse_device

    listed = [d for d in map(parse_device, args.gpus.split(",")) if d is not None]
    devices = gpu_devices(listed) if listed else None
    specs, plan = worker_specs(
        gpus=devices, gpus_per_trial=args.set_size, n_slots=args.slots, prefix="pool"
    )
    folder = Path(args.dir)
    with dask.config.set(CLUSTER_CONFIG):
        scheduler = Scheduler(
            host=args.host,
            port=args.port,
            dashboard=False,
            dashboard_address=f"{args.host}:{args.metrics_port}",
            plugins=[] if args.no_arbiter else [PoolArbiter(ttl_s=args.ttl)],
        )
        await scheduler
        nannies = []
        for spec in specs.values():
            options = {**spec["options"], "host": args.host}
            nannies.append(Nanny(scheduler.address, **options))
        await asyncio.gather(*nannies)
    info = {
        "address": scheduler.address,
        "pid": os.getpid(),
        "started": time.time(),
        "workers": len(nannies),
        "resource": "GPU" if devices else "SLOT",
        # Devices, not sets: packed workers (a fractional set size) share theirs.
        "devices": len({d for s in plan.sets for d in s}),
        "set_size": args.set_size,
        "arbiter": not args.no_arbiter,
        "metrics": metrics_url(scheduler),
    }
    tmp = folder / f".{POOL_FILE}.tmp"
    tmp.write_text(json.dumps(info))
    tmp.replace(folder / POOL_FILE)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    (folder / POOL_FILE).unlink(missing_ok=True)
    await asyncio.gather(*(n.close(timeout=20) for n in nannies), return_exceptions=True)
    await scheduler.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hpsearch.cluster.pool._serve")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8786)
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT)
    parser.add_argument("--gpus", default="")
    parser.add_argument("--slots", type=int, default=None)
    parser.add_argument("--set-size", type=float, default=1.0)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--no-arbiter", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
