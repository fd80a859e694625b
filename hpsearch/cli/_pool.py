"""``hpsearch pool start|status|stop``: a long-running device pool on this machine that
several studies share (a Dask scheduler with the pool's arbiter, and this machine's
workers); ``hpsearch worker ADDRESS`` adds other machines, and a study joins it with
``cluster: {address: ADDRESS}``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from hpsearch.cli._common import _console, _docs, _user_error

pool_app = typer.Typer(help="A device pool that several studies share.", no_args_is_help=True)

_DIR_HELP = "The pool's folder: its address file and log (default ~/.hpsearch/pool)."
#: Seconds ``pool start`` waits for the pool to run.
START_TIMEOUT_S = 120.0


def _folder(folder: Path | None) -> Path:
    from hpsearch.cluster.pool import DEFAULT_DIR

    return (folder or DEFAULT_DIR).expanduser()


def _fail(message: str) -> typer.Exit:
    return _user_error(ValueError(message))


@pool_app.command(epilog=_docs("pool"))
def start(
    gpus: str = typer.Option(
        "auto",
        "--gpus",
        help="GPUs of this machine: auto, none, or a list such as 0,1,2,3 (GPU indices, MIG "
        "instances' UUIDs; a GPU in MIG mode stands for its instances).",
    ),
    slots: int | None = typer.Option(
        None, "--slots", help="CPU slots where there are no GPUs (default: one per core)."
    ),
    set_size: str = typer.Option(
        "1",
        "--set-size",
        help="Devices of each worker (the largest trial the pool runs here), or 1/2, 1/4, "
        "1/8: that many workers share each device, for studies of that gpus_per_trial.",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface the pool listens on."),
    port: int = typer.Option(8786, "--port", help="The scheduler's port (0: a free one)."),
    metrics_port: int = typer.Option(
        8787,
        "--metrics-port",
        help="The port of the scheduler's HTTP server, whose /metrics serves the pool's "
        "series for Prometheus (0: a free one; one taken: a free one, printed).",
    ),
    lease_ttl: float = typer.Option(
        10.0, "--lease-ttl", help="Seconds without a heartbeat before a study loses its devices."
    ),
    no_arbiter: bool = typer.Option(
        False,
        "--no-arbiter",
        help="A plain Dask scheduler without the arbiter, where studies race for free workers "
        "(for comparisons; a study given cluster.address still installs one).",
    ),
    folder: Path | None = typer.Option(None, "--dir", help=_DIR_HELP),
) -> None:
    """Start the pool in the background and print its address."""
    from hpsearch.cluster import device_count
    from hpsearch.cluster.pool import POOL_FILE, read_pool
    from hpsearch.exceptions import GpuAllocationError
    from hpsearch.spec import parse_device

    where = _folder(folder)
    where.mkdir(parents=True, exist_ok=True)
    running = read_pool(where)
    if running is not None:
        raise _fail(f"{where}: a pool already runs at {running['address']} (hpsearch pool stop)")
    if gpus == "auto":
        from hpsearch.cluster import discover_gpus

        devices = ",".join(str(g.device) for g in discover_gpus())
    elif gpus == "none":
        devices = ""
    elif all(parse_device(part) is not None for part in gpus.split(",")):
        devices = gpus
    else:
        raise _fail(f"--gpus: expected auto, none or a list such as 0,1,2,3, got {gpus!r}")
    if slots is not None and slots < 1:
        raise _fail("--slots: expected an integer >= 1")
    try:
        size = device_count(set_size, "--set-size")
    except GpuAllocationError as exc:
        raise _fail(str(exc)) from None
    if not 0 <= metrics_port < 65536:
        raise _fail(f"--metrics-port: expected a port (0: a free one), got {metrics_port}")
    if not lease_ttl > 0:
        raise _fail(f"--lease-ttl: expected seconds > 0, got {lease_ttl}")
    (where / POOL_FILE).unlink(missing_ok=True)
    command = [sys.executable, "-m", "hpsearch.cluster.pool._serve", "--dir", str(where)]
    command += ["--host", host, "--port", str(port), "--metrics-port", str(metrics_port)]
    command += ["--gpus", devices]
    command += ["--set-size", f"{size:g}", "--ttl", str(lease_ttl)]
    command += ["--slots", str(slots)] if slots else []
    command += ["--no-arbiter"] if no_arbiter else []
    with open(where / "pool.log", "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while (info := read_pool(where)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = (where / "pool.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise _fail(f"the pool did not start: {tail[0] if tail else 'see ' + str(where)}")
        time.sleep(0.2)
    kind = "GPU" if info["resource"] == "GPU" else "CPU slot"
    joins = (
        f"a study joins it with cluster: {{address: {info['address']}}}"
        if info.get("arbiter", True)
        else "no arbiter: studies given a Dask client race for its workers"
    )
    _console().print(
        f"pool at [bold]{info['address']}[/]: {info['workers']} worker(s), "
        f"{info['devices']} {kind}(s); {joins}"
    )
    if info.get("metrics"):
        _console().print(f"metrics {info['metrics']}")


def _status(address: str) -> dict[str, Any]:
    from distributed import Client

    from hpsearch.cluster.pool import pool_status

    with Client(address, timeout=10) as client:
        return pool_status(client)


@pool_app.command(epilog=_docs("pool"))
def status(
    folder: Path | None = typer.Option(None, "--dir", help=_DIR_HELP),
    address: str | None = typer.Option(None, "--address", help="A pool elsewhere."),
    as_json: bool = typer.Option(False, "--json", help="Print it as JSON."),
) -> None:
    """The pool's studies: weight, priority, devices held, fair share, waiting, preempted."""
    from rich.table import Table

    from hpsearch.cluster.pool import read_pool

    if address is None:
        info = read_pool(_folder(folder))
        if info is None:
            raise _fail(f"{_folder(folder)}: no pool runs here (hpsearch pool start)")
        address = str(info["address"])
        if not info.get("arbiter", True):
            raise _fail(f"the pool at {address} runs no arbiter (started with --no-arbiter)")
    try:
        state = _status(address)
    except (OSError, TimeoutError) as exc:
        raise _fail(f"cannot reach the pool at {address}: {exc}") from None
    if as_json:
        typer.echo(json.dumps(state))
        return
    console = _console()
    kind = "GPUs" if state["resource"] == "GPU" else "CPU slots"
    console.print(
        f"pool at [bold]{address}[/]: {state['workers']} worker(s), {state['capacity']:g} "
        f"{kind}, {state['free']:g} free"
    )
    if state.get("metrics"):
        console.print(f"metrics {state['metrics']}")
    if not state["studies"]:
        console.print("no study runs on it")
        return
    table = Table(show_header=True)
    for column in ("study", "priority", "weight", "held", "fair share", "waiting"):
        table.add_column(column, justify="left" if column == "study" else "right")
    table.add_column("device-s", justify="right")
    table.add_column("preempted", justify="right")
    for study in state["studies"]:
        table.add_row(
            study["name"],
            study["priority"],
            f"{study['weight']:g}",
            f"{study['held']:g}",
            f"{study['share']:.2f}",
            f"{study['waiting']:g}",
            f"{study['device_seconds']:.0f}",
            str(study["preemptions"]),
        )
    console.print(table)


@pool_app.command(epilog=_docs("pool"))
def stop(folder: Path | None = typer.Option(None, "--dir", help=_DIR_HELP)) -> None:
    """Stop the pool: its workers end (trials in flight stop, and resume on a rerun)."""
    from hpsearch.cluster.pool import read_pool

    where = _folder(folder)
    info = read_pool(where)
    if info is None:
        raise _fail(f"{where}: no pool runs here")
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while read_pool(where) is not None or _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    _console().print(f"pool at {info['address']} stopped")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A child of this process that exited stays a zombie until reaped: not alive.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == 0
