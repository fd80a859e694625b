"""The back-ends on this machine's side: a local cluster of worker processes, an existing
Dask scheduler (``cluster.address``), or a ``distributed.Client`` the caller already has."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hpsearch.cluster._backend import Backend, trial_sizes

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.spec import DeviceId, StudySpec

_LOOPBACK = ("127.0.0.1", "localhost", "::1", "")


def local_gpus(spec: StudySpec) -> list[DeviceId] | None:
    """The GPUs the local cluster may use (``cluster.gpus``; a GPU in MIG mode stands for its
    MIG instances), or ``None`` for CPU slots."""
    from hpsearch.cluster._gpus import discover_gpus
    from hpsearch.cluster._mig import gpu_devices
    from hpsearch.exceptions import GpuAllocationError

    wanted = spec.cluster.gpus
    if wanted == "none":
        return None
    inventory = discover_gpus()
    if wanted == "auto":
        return [g.device for g in inventory] or None
    found = list(dict.fromkeys(g.index for g in inventory))
    missing = [g for g in wanted if g not in found]
    if missing:
        where = f"{spec.source}: " if spec.source else ""
        have = ", ".join(map(str, found)) or "none"
        raise GpuAllocationError(
            f"{where}cluster.gpus: GPU {', '.join(map(str, missing))} not found "
            f"(visible GPUs: {have})",
            needed=len(wanted),
            found=len(found),
        )
    return gpu_devices(wanted, inventory)


def _remote_host(address: str) -> str | None:
    """The host of a scheduler address when it is another machine, else ``None``."""
    from distributed.comm import get_address_host

    host = get_address_host(address)
    return None if host in _LOOPBACK else host


def _env_of(options: dict[str, object]) -> dict[str, object]:
    env = options["env"]
    assert isinstance(env, dict)
    return {k: v for k, v in env.items() if k.startswith(("HPSEARCH", "CUDA"))}


class LocalBackend(Backend):
    """A local cluster: one worker process per GPU set (or per CPU slot) of this machine."""

    def render(self) -> str:
        from hpsearch.cluster._local import worker_specs

        specs, plan = worker_specs(**self._layout())
        lines = [f"local cluster: {len(specs)} worker processes on 127.0.0.1 ({plan.describe()})"]
        for name, worker in specs.items():
            opts = worker["options"]
            lines.append(f"  {name}: resources {opts['resources']}, env {_env_of(opts)}")
        return "\n".join(lines)

    def _layout(self) -> dict[str, Any]:
        """The arguments of :func:`~hpsearch.cluster._local.worker_specs` for this study."""
        cfg = self.spec.cluster
        sizes = trial_sizes(self.spec)
        return {
            "gpus": local_gpus(self.spec),
            "gpus_per_trial": max(sizes),
            "mixed_sizes": len(sizes) > 1,
            "n_workers": None if cfg.n_workers in (None, "auto") else int(cfg.n_workers),
            "n_slots": None if cfg.slots in (None, "auto") else int(cfg.slots),
        }

    @contextlib.contextmanager
    def start(self) -> Iterator[Client]:
        from distributed import Client

        from hpsearch.cluster._base import security
        from hpsearch.cluster._gpus import nvml_links
        from hpsearch.cluster._local import start_local_cluster

        cfg = self.spec.cluster
        sec = security(cfg.tls)
        layout = self._layout()
        gpus = layout["gpus"]
        cluster = start_local_cluster(
            **layout, links=nvml_links(gpus) if gpus else None, security=sec
        )
        client = Client(cluster, security=sec)
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close()
            with contextlib.suppress(Exception):
                cluster.close(timeout=20)


class SchedulerBackend(Backend):
    """An existing Dask scheduler (``cluster.address``) whose workers were started apart."""

    @property
    def address(self) -> str:
        address = self.spec.cluster.address
        assert address, "SchedulerBackend needs cluster.address"
        return address

    @property
    def remote(self) -> str | None:
        return _remote_host(self.address)

    def render(self) -> str:
        address, size = self.address, f"{self.spec.trial_devices:g}"
        return (
            f"existing Dask scheduler {address}: trials go to its workers; start them "
            f"on each node with: hpsearch worker {address} --gpus auto --gpus-per-trial {size}"
        )

    @contextlib.contextmanager
    def start(self) -> Iterator[Client]:
        from hpsearch.cluster._base import connect, security

        client = connect(self.address, security=security(self.spec.cluster.tls))
        try:
            yield client
        finally:
            client.close()


class ClientBackend(Backend):
    """A ``distributed.Client`` the caller opened: used as it is, and left open."""

    def __init__(self, spec: StudySpec, client: Client) -> None:
        super().__init__(spec)
        self.client = client

    @property
    def remote(self) -> str | None:
        return _remote_host(self.client.scheduler.address)

    def render(self) -> str:
        return f"existing Dask client of scheduler {self.client.scheduler.address}"

    @contextlib.contextmanager
    def start(self) -> Iterator[Client]:
        yield self.client
