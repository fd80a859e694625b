"""Optuna storages: opening the study's storage and serving it to the workers.

The coordinator is the only process that opens the storage itself. Workers reach the study
through Optuna's gRPC storage proxy, served from a thread of the coordinator, so that inside
a trial they hold a real :class:`optuna.Trial` (``report`` and ``should_prune`` just work)
and need neither the storage file nor database credentials.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc
    from optuna.storages import BaseStorage

JOURNAL_PREFIX = "journal://"

#: Seconds the journal's background fsync gathers appends before it syncs them (see
#: :func:`journal_backend`).
JOURNAL_SYNC_S = 0.05

log = logging.getLogger(__name__)


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
    ``sqlite:///x.db`` or ``postgresql+psycopg://...``). One that cannot be opened raises
    :class:`~hpsearch.exceptions.StorageError`, one line.
    """
    import optuna

    if url.startswith(JOURNAL_PREFIX) or url.endswith(".journal"):
        path = Path(url.removeprefix(JOURNAL_PREFIX))
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(journal_backend(str(path)))
    try:
        return optuna.storages.get_storage(url)
    except Exception as exc:  # SQLAlchemy's errors, or ImportError for a missing driver
        from hpsearch.exceptions import StorageError

        lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        reason = lines[0] if lines else type(exc).__name__
        raise StorageError(f"Optuna storage {redact(url)}: cannot open it ({reason})") from None


def journal_backend(path: str) -> Any:
    """Optuna's journal file backend, its fsyncs grouped.

    Optuna's :class:`~optuna.storages.journal.JournalFileBackend` fsyncs every append before
    it returns: about 4 ms of wall here, and a trial makes about eight appends (the ask, the
    parameters its objective suggests, its start, two attributes, the tell), one at a time
    under the storage's lock. This backend writes every append to the file under the same
    file lock before it returns, exactly as Optuna's does, so every reader (a worker through
    the proxy, ``hpsearch status``, a restarted coordinator) sees it at once and a killed
    process loses nothing; one background thread per process then fsyncs the file once for
    all the appends of the last :data:`JOURNAL_SYNC_S` seconds. What a power cut can take is
    that last fraction of a second (as with SQLite's WAL at ``synchronous=NORMAL``);
    :func:`sync_journals` waits for the fsyncs, and runs at exit.
    """
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    class GroupSyncJournalFile(JournalFileBackend):
        def __init__(self, file_path: str) -> None:
            self._file = file_path
            self._file_lock = JournalFileSymlinkLock(file_path)
            super().__init__(file_path, lock_obj=self._file_lock)

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            text = "\n".join(json.dumps(entry, separators=(",", ":")) for entry in logs) + "\n"
            if threading.current_thread() is threading.main_thread():
                # Ctrl-C raises KeyboardInterrupt in the main thread, wherever it is: between
                # the lock's acquire and its release it would leave the lock file behind, and
                # every writer (this process's own interruption records first) would wait for
                # its grace period. Another thread takes and releases it; an interrupt only
                # stops the wait for that thread.
                from hpsearch._process import ordered_executor

                ordered_executor("hpsearch-journal").submit(self._append, text).result()
            else:
                self._append(text)
            _syncer.written(self._file)

        def _append(self, text: str) -> None:
            self._file_lock.acquire()
            try:
                with open(self._file, "ab") as f:
                    f.write(text.encode("utf-8"))
            finally:
                self._file_lock.release()

    return GroupSyncJournalFile(path)


class _JournalSyncer:
    """One thread per process that fsyncs the journal files written since its last pass."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.reset()

    def reset(self) -> None:
        """Start empty (in a forked child: the parent's thread and lock are not its own)."""
        self._cond = threading.Condition()
        self._dirty: set[str] = set()
        self._writes = 0  # appends noted, ever
        self._synced = 0  # appends known to be on disk
        self._thread: threading.Thread | None = None

    def written(self, path: str) -> None:
        with self._cond:
            self._dirty.add(path)
            self._writes += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="hpsearch-journal-sync", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._dirty:
                    self._cond.wait()
                paths, self._dirty = self._dirty, set()
                upto = self._writes
            for path in paths:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                except FileNotFoundError:
                    pass  # the study's folder was removed: nothing left to sync
                except OSError as exc:
                    log.warning("could not fsync the journal %s: %s", path, exc)
            with self._cond:
                self._synced = max(self._synced, upto)
                self._cond.notify_all()
            time.sleep(self.interval)  # the appends of the next interval share one fsync

    def sync(self, timeout: float | None = 30.0) -> bool:
        """Wait until every append made so far is on disk; whether it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            upto = self._writes
            while self._synced < upto:
                if self._thread is None or not self._thread.is_alive():
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True


_syncer = _JournalSyncer(JOURNAL_SYNC_S)


def sync_journals(timeout: float | None = 30.0) -> bool:
    """Wait until every journal append this process made is on disk (fsynced); whether it is."""
    return _syncer.sync(timeout)


atexit.register(sync_journals)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_syncer.reset)


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
#: Seconds a worker waits for a coordinator's proxy to answer. The proxy runs before any
#: trial is sent, so one that does not answer is gone (its coordinator stopped or died): a
#: trial it left behind fails quickly rather than hold its worker from the next study's.
PROXY_READY_S = 10.0
#: Proxies found gone, by address, and when: asked again, they fail at once for a while.
_gone: dict[tuple[str, int], float] = {}


def proxy_client(address: ProxyAddress) -> BaseStorage:
    """One ``GrpcStorageProxy`` per process and address (it keeps a trial cache), which
    answers what the coordinator told it of a study (see :func:`study_known`) without a
    round trip."""
    key = (address.host, address.port)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            import warnings

            from optuna.exceptions import ExperimentalWarning

            if time.monotonic() - _gone.get(key, -math.inf) < 3 * PROXY_READY_S:
                raise ConnectionError(f"the study's proxy at {address.host}:{address.port} is gone")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                client = _proxy_class()(host=address.host, port=address.port)
            try:
                client.wait_server_ready(timeout=PROXY_READY_S)
            except ConnectionError:
                _gone[key] = time.monotonic()
                raise
            _clients[key] = client
        return client


def study_known(storage: BaseStorage, name: str, study_id: int, directions: list[Any]) -> None:
    """Tell a worker's proxy client a study's id and directions, as the coordinator sent
    them with a trial: building an ``optuna.Study`` then asks the storage for neither.

    Both are fixed for a study's life, but a study deleted and created again under its name
    gets a new id, so they are told with every trial rather than remembered from the first
    answer. Two round trips of a trial's ten through the coordinator, each of which waits
    for the coordinator's busy process (about 3 ms a trial each, measured on 2 cores)."""
    known = getattr(storage, "known_studies", None)
    if known is not None:
        known[name] = (study_id, list(directions))


_proxy: type | None = None


def _proxy_class() -> type:
    """``GrpcStorageProxy`` that answers ``get_study_id_from_name`` and
    ``get_study_directions`` from what it was told (:func:`study_known`), else asks."""
    global _proxy
    if _proxy is None:
        from optuna.storages import GrpcStorageProxy

        class _WorkerProxy(GrpcStorageProxy):  # type: ignore[misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.known_studies: dict[str, tuple[int, list[Any]]] = {}

            def get_study_id_from_name(self, study_name: str) -> int:
                known = self.known_studies.get(study_name)
                return known[0] if known else super().get_study_id_from_name(study_name)

            def get_study_directions(self, study_id: int) -> list[Any]:
                for known_id, directions in self.known_studies.values():
                    if known_id == study_id:
                        return list(directions)
                return super().get_study_directions(study_id)

        _proxy = _WorkerProxy
    return _proxy
