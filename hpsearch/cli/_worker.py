"""``hpsearch worker``: this node's Dask workers, joining an existing scheduler."""

from __future__ import annotations

from pathlib import Path

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
    from hpsearch.cluster import node_workers, serve_workers
    from hpsearch.exceptions import HpsearchError

    given = [p for p in (tls_ca_file, tls_cert, tls_key) if p is not None]
    if given and len(given) != 3:
        raise _user_error(ValueError("--tls-ca-file, --tls-cert and --tls-key go together"))
    tls = (str(tls_ca_file), str(tls_cert), str(tls_key)) if given else None
    try:
        specs, plan, devices = node_workers(
            scheduler,
            gpus=gpus,
            gpus_per_trial=gpus_per_trial,
            mixed_sizes=mixed_sizes,
            slots=slots,
            host=host,
            name=name,
            tls=tls,
        )
    except HpsearchError as exc:
        raise _user_error(exc) from None
    what = "GPU" if devices else "CPU slot"
    _console().print(
        f"[bold]{len(specs)}[/] worker(s) joining {scheduler}: "
        f"{plan.describe().replace('GPU set', what + ' set')}"
    )
    serve_workers(scheduler, specs)
