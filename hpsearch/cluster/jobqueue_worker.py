"""The worker launcher of a SLURM job or a Kubernetes pod: what ``hpsearch worker`` starts, with
the arguments dask-jobqueue and the Dask Kubernetes operator pass to a worker command.

    python -m hpsearch.cluster.jobqueue_worker [SCHEDULER] --name N [--nthreads K]
        [--memory-limit M] [--death-timeout S] [--nworkers P] [--dashboard ...]
        --gpus auto --gpus-per-trial G [--slots S]

The scheduler address comes from the command line (SLURM) or ``DASK_SCHEDULER_ADDRESS``
(Kubernetes). Options that a plain ``dask worker`` would take are accepted; the number of
workers is one per GPU set of the node, as with ``hpsearch worker``.
"""

from __future__ import annotations

import argparse
import os
import sys


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hpsearch.cluster.jobqueue_worker")
    p.add_argument("scheduler", nargs="?", default=os.environ.get("DASK_SCHEDULER_ADDRESS"))
    p.add_argument("--name", default=None)
    p.add_argument("--gpus", default="auto")
    p.add_argument("--gpus-per-trial", type=float, default=1.0)
    p.add_argument("--slots", type=int, default=None)
    # What dask-jobqueue and the operator add; the launcher decides these itself.
    for flag in (
        "--nthreads",
        "--memory-limit",
        "--death-timeout",
        "--nworkers",
        "--dashboard-address",
        "--local-directory",
        "--interface",
        "--protocol",
    ):
        p.add_argument(flag, default=None)
    p.add_argument("--nanny", action="store_true")
    p.add_argument("--no-nanny", action="store_true")
    p.add_argument("--dashboard", action="store_true")
    args = p.parse_args(argv)
    if not args.scheduler:
        p.error("no scheduler address: give it, or set DASK_SCHEDULER_ADDRESS")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    from hpsearch.cluster._node import node_workers, serve_workers
    from hpsearch.exceptions import HpsearchError

    try:
        specs, plan, devices = node_workers(
            args.scheduler,
            gpus=args.gpus,
            gpus_per_trial=f"{args.gpus_per_trial:g}",
            slots=args.slots,
            name=args.name,
        )
    except HpsearchError as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    what = "GPU" if devices else "CPU slot"
    described = plan.describe().replace("GPU set", what + " set")
    print(f"{len(specs)} worker(s) joining {args.scheduler}: {described}", flush=True)
    serve_workers(args.scheduler, specs)


if __name__ == "__main__":
    main()
