"""Optuna storages: opening the study's storage and serving it to the workers.

The coordinator is the only process that opens the storage itself. Workers reach the study
through Optuna's gRPC storage proxy, served from a thread of the coordinator, so that inside
a trial they hold a real :class:`optuna.Trial` (``report`` and ``should_prune`` just work)
and need neither the storage file nor database credentials.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc
    from optuna.storages import BaseStorage

JOURNAL_PREFIX = "journal://"


def expand_env(url: str, *, field: str) -> str:
    """Replace ``${VAR}`` in a URL by the environment variable, so that study files hold no
    credentials: ``postgresql+psycopg://hps:${PGPASSWORD}@db/hps``.

    Raises:
        SpecError: naming the field and the variable when it is not set.
    """
    from hpsearch.exceptions import SpecError

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise SpecError(
                f"{field}: the environment variable {name} is not set (the URL uses ${{{name}}})"
            )
        return os.environ[name]

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", value, url)


def redact(url: str) -> str:
    """Hide the password of a storage URL: ``postgresql://u:secret@h/db`` -> ``postgresql://u:***@h/db``."""
    return re.sub(r"(//[^:/@]+:)[^@]+@", r"\1***@", url)


def open_storage(url: str) -> BaseStorage:
    """Open an Optuna storage from a URL.

    ``journal://PATH`` (or a bare path ending in ``.journal``) is Optuna's journal file;
    anything else is handed to :func:`optuna.storages.get_storage` (RDB URLs such as
    ``sqlite:///x.db`` or ``postgresql+psycopg://...``).
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if url.startswith(JOURNAL_PREFIX) or url.endswith(".journal"):
        path = Path(url.removeprefix(JOURNAL_PREFIX))
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    return optuna.storages.get_storage(url)


@dataclass
class ProxyAddress:
    """Where the workers find the study: picklable, shipped with every trial."""

    host: str
    port: int


class StorageProxy:
    """Serve a storage over Optuna's gRPC proxy from threads of this process.

    Optuna offers only the blocking ``run_grpc_proxy_server``; its lifecycle is not public
    yet, so the server is built here from the same servicer, to be started and stopped
    with the study.

    Example:
        >>> import optuna
        >>> proxy = StorageProxy(optuna.storages.InMemoryStorage()).start()
        >>> proxy.address.port > 0
        True
        >>> proxy.stop()
    """

    def __init__(
        self, storage: BaseStorage, *, host: str = "127.0.0.1", n_threads: int = 16
    ) -> None:
        self.storage = storage
        self.host = host
        self.n_threads = n_threads
        self._server: grpc.Server | None = None
        self.address = ProxyAddress(host, 0)

    def start(self) -> StorageProxy:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from optuna.storages._grpc.auto_generated import api_pb2_grpc
        from optuna.storages._grpc.servicer import OptunaStorageProxyService

        server = grpc.server(
            ThreadPoolExecutor(max_workers=self.n_threads, thread_name_prefix="hpsearch-grpc")
        )
        api_pb2_grpc.add_StorageServiceServicer_to_server(
            OptunaStorageProxyService(self.storage), server
        )
        port = server.add_insecure_port(f"{self.host}:0")
        server.start()
        self._server = server
        self.address = ProxyAddress(self.host, port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5.0)
            self._server = None

    def __enter__(self) -> StorageProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_clients: dict[tuple[str, int], BaseStorage] = {}
_clients_lock = threading.Lock()


def proxy_client(address: ProxyAddress) -> BaseStorage:
    """One ``GrpcStorageProxy`` per process and address (it keeps a trial cache)."""
    key = (address.host, address.port)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            import warnings

            from optuna.exceptions import ExperimentalWarning
            from optuna.storages import GrpcStorageProxy

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                client = GrpcStorageProxy(host=address.host, port=address.port)
            client.wait_server_ready(timeout=30)
            _clients[key] = client
        return client
