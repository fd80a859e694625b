"""What a running cluster offers, read from the scheduler."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import ClusterError

if TYPE_CHECKING:
    from distributed import Client

RESOURCE_KEYS = ("GPU", "SLOT")


@dataclass(frozen=True)
class Capacity:
    """The sets a cluster's workers advertise.

    Attributes:
        key: the resource trials ask for (``GPU`` where any worker has GPUs, else ``SLOT``),
            or ``None`` when no worker advertises either (plain ``dask worker``).
        per_worker: the amount of ``key`` each worker has, by worker address.
        n_threads: Dask threads of each worker (used when there is no resource).
    """

    key: str | None
    per_worker: dict[str, float] = field(default_factory=dict)
    n_threads: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """All of ``key`` in the cluster."""
        return sum(self.per_worker.values())

    @property
    def largest(self) -> float:
        """The most of ``key`` one worker has: the largest trial that can run."""
        return max(self.per_worker.values(), default=0.0)

    def concurrent_trials(self, size: float) -> int:
        """How many trials of ``size`` devices (a fraction, where trials are packed) can run
        at once: each worker runs as many as its share of ``key`` and its threads allow."""
        if self.key is None:
            return sum(self.n_threads.values())
        fits = {addr: int(amount // size) for addr, amount in self.per_worker.items()}
        return sum(min(n, self.n_threads.get(addr) or n) for addr, n in fits.items())

    def check(self, size: float) -> None:
        """Fail, in one line, when no worker can take a trial of ``size`` devices."""
        if not self.per_worker and not self.n_threads:
            raise ClusterError("the Dask cluster has no workers", needed=size, found=0)
        if self.key is not None and self.concurrent_trials(size) == 0:
            largest = max(self.per_worker.values(), default=0)
            raise ClusterError(
                f"no worker can run a trial of gpus_per_trial={size:g}: the largest worker "
                f"has {self.key}={largest:g} (start workers with --gpus-per-trial {size:g}, or "
                "lower objective.gpus_per_trial)",
                needed=size,
                found=int(largest),
            )


#: Seconds a study waits for a worker when it finds none (one restarting after a crash, or
#: workers that are still joining a cluster just started).
WORKER_WAIT_S = 30.0


def capacity(client: Client, *, wait_s: float = 0.0) -> Capacity:
    """Read the workers' resources from the scheduler, waiting up to ``wait_s`` seconds for a
    first worker when there is none."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers and wait_s > 0:
        with contextlib.suppress(TimeoutError):
            client.wait_for_workers(1, timeout=wait_s)
        workers = client.scheduler_info(n_workers=-1)["workers"]
    key = None
    for candidate in RESOURCE_KEYS:
        if any(w.get("resources", {}).get(candidate) for w in workers.values()):
            key = candidate
            break
    per_worker = (
        {addr: float(w.get("resources", {}).get(key, 0)) for addr, w in workers.items()}
        if key
        else {}
    )
    return Capacity(
        key, per_worker, {addr: int(w.get("nthreads", 1)) for addr, w in workers.items()}
    )


def security(tls: Any) -> Any:
    """A ``distributed.Security`` for ``cluster.tls``: ``None`` (no TLS), ``"auto"`` (temporary,
    self-signed: the local cluster only) or certificate files (every role uses the same)."""
    if tls is None:
        return None
    from distributed import Security

    if tls == "auto":
        return Security.temporary()
    import os

    ca, cert, key = (os.path.expanduser(p) for p in (tls.ca_file, tls.cert, tls.key))
    return Security(
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )


def connect(address: str, *, timeout: float = 30.0, security: Any = None) -> Client:
    """Join an existing Dask scheduler, or fail in one line."""
    from distributed import Client

    try:
        return Client(address, timeout=timeout, security=security)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {exc}") from None


def software(needs_torch: bool = True) -> dict[str, str | None]:
    """What this process has: the versions of Python, hpsearch, optuna and torch (``None``
    when a package does not import). Run on every worker by :func:`check_workers`."""
    import importlib
    import platform

    out: dict[str, str | None] = {"python": ".".join(platform.python_version_tuple()[:2])}
    for name in ("hpsearch", "optuna", "torch") if needs_torch else ("hpsearch", "optuna"):
        try:
            out[name] = str(importlib.import_module(name).__version__)
        except Exception:
            out[name] = None
    return out


def version_problems(
    here: Mapping[str, str | None], workers: Mapping[str, Mapping[str, str | None]]
) -> list[str]:
    """One line per worker that cannot run this study's trials, saying what differs.

    Example:
        >>> here = {"python": "3.11", "hpsearch": "0.1.0", "optuna": "5.0.0", "torch": "2.13.0"}
        >>> version_problems(here, {"tcp://a:1": {**here, "torch": None}, "tcp://b:1": dict(here)})
        ['worker tcp://a:1: torch does not import (the built-in models need it)']
        >>> newer = {**here, "hpsearch": "0.2.0", "python": "3.12"}
        >>> for line in version_problems(here, {"tcp://c:1": newer}):
        ...     print(line)
        worker tcp://c:1: hpsearch 0.2.0, the coordinator has 0.1.0
        worker tcp://c:1: Python 3.12, the coordinator has 3.11 (trials are pickled between them)
    """
    lines = []
    for address, there in sorted(workers.items()):
        for name in ("hpsearch", "optuna"):
            if there.get(name) is None:
                lines.append(f"worker {address}: {name} does not import")
            elif name == "hpsearch" and there[name] != here.get(name):
                lines.append(
                    f"worker {address}: hpsearch {there[name]}, "
                    f"the coordinator has {here.get(name)}"
                )
            elif (
                name == "optuna"
                and str(there[name]).split(".")[:2] != str(here.get(name)).split(".")[:2]
            ):
                lines.append(
                    f"worker {address}: optuna {there[name]}, the coordinator has "
                    f"{here.get(name)} (the storage proxy needs the same minor version)"
                )
        if "torch" in here and here.get("torch") is not None and there.get("torch") is None:
            lines.append(f"worker {address}: torch does not import (the built-in models need it)")
        if there.get("python") != here.get("python"):
            lines.append(
                f"worker {address}: Python {there.get('python')}, the coordinator has "
                f"{here.get('python')} (trials are pickled between them)"
            )
    return lines


def check_workers(client: Client, *, needs_torch: bool) -> None:
    """Fail in one line per problem when a worker cannot run the study's trials."""
    here = software(needs_torch)
    problems = version_problems(here, client.run(software, needs_torch))
    if problems:
        raise ClusterError("\n".join(problems))
