"""Where a trial logs, one MLflow client per URI, a server's health, and MLflow's limits."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import TrackingError

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: The MLflow status of a trial a scheduler paused (it runs again, or ends PRUNED, later).
PAUSED_STATUS = "SCHEDULED"
#: MLflow run status for each way a trial's attempt ends (a final Optuna state, or one that
#: goes on later: see ``hpsearch.trial.OutcomeState``).
RUN_STATUS = {
    "COMPLETE": "FINISHED",
    "PRUNED": "FINISHED",
    "FAIL": "FAILED",
    # Stopped by Ctrl-C or SIGTERM, not ended: it resumes in the same run.
    "INTERRUPTED": "KILLED",
    # Preempted by a study with a better claim on a shared pool: it resumes later, as a
    # trial a scheduler paused does.
    "PREEMPTED": "SCHEDULED",
    "PAUSED": PAUSED_STATUS,
}
MAX_BATCH = {"metrics": 1000, "params": 100, "tags": 100}
PARAM_VALUE_LIMIT = 6000


def flush_timeout() -> float:
    """Seconds the end of a study waits for the workers' MLflow writes before it saves the
    rest to disk: 120, or ``HPSEARCH_TRACKING_FLUSH_S``."""
    return float(os.environ.get("HPSEARCH_TRACKING_FLUSH_S", "120"))


@dataclass(frozen=True)
class TrackingTarget:
    """Where a trial logs: shipped with every trial task (plain, picklable values)."""

    uri: str
    experiment_id: str
    parent_run_id: str
    study_name: str


def param_value(value: Any) -> str:
    """A param as MLflow takes it: text, cut to its length limit."""
    text = str(value)
    return text if len(text) <= PARAM_VALUE_LIMIT else text[: PARAM_VALUE_LIMIT - 3] + "..."


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


_clients: dict[str, MlflowClient] = {}
_clients_lock = threading.Lock()


def cache_dir() -> Path:
    """Where hpsearch keeps what it can rebuild: ``HPSEARCH_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/hpsearch`` (``~/.cache/hpsearch``)."""
    if os.environ.get("HPSEARCH_CACHE_DIR"):
        return Path(os.environ["HPSEARCH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpsearch"


def _empty_store_template() -> Path:
    """An empty SQLite tracking store of this MLflow version, built once per machine.

    Creating a store runs every one of MLflow's schema migrations: 2.5-3 s of CPU here,
    paid by each new study. A copy of an empty, migrated store is the same file in a
    millisecond. It is built in a temporary file and renamed into place, so processes
    that start together never see half of it.
    """
    import mlflow

    path = cache_dir() / f"mlflow-{mlflow.__version__}-empty.db"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".building-", suffix=".db")
    os.close(fd)
    os.unlink(tmp)
    try:
        mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments()
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path


def seed_sqlite_store(uri: str) -> None:
    """Start a new SQLite tracking store as a copy of the empty template.

    The copy's "Default" experiment (MLflow's experiment 0, which hpsearch never logs to)
    would keep the template's artifact folder; it is pointed at ``mlruns/0`` beside the
    store, which is what MLflow would write for a store created from that folder. That is
    one UPDATE of MLflow's ``experiments`` table (a column stable since MLflow 1.x; MLflow
    has no API to move an experiment's artifact location); tests/test_tracking_store.py
    checks the result through MLflow's public client, so a schema change fails there.
    """
    if not uri.startswith("sqlite:///"):
        return
    target = Path(uri.removeprefix("sqlite:///"))
    if target.exists():
        return
    try:
        template = _empty_store_template()
    except Exception:  # no writable cache: MLflow creates the store itself, as before
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".mlflow-", suffix=".db")
    os.close(fd)
    try:
        shutil.copyfile(template, tmp)
        location = (target.parent / "mlruns" / "0").resolve()
        with contextlib.closing(sqlite3.connect(tmp)) as con, con:
            con.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                (str(location),),
            )
        with contextlib.suppress(FileExistsError):
            os.link(tmp, target)  # never replaces a store another process just made
    finally:
        os.unlink(tmp)


def get_client(uri: str) -> MlflowClient:
    """One ``MlflowClient`` per process and URI (the SQLite engine is built once)."""
    with _clients_lock:
        client = _clients.get(uri)
        if client is None:
            from mlflow import MlflowClient

            seed_sqlite_store(uri)
            _sync_normal(uri)
            client = _clients[uri] = MlflowClient(tracking_uri=uri, registry_uri=uri)
        return client


_normal_sync: set[str] = set()  # real paths of the SQLite stores this process writes


def _sync_normal(uri: str) -> None:
    """Let this process's connections to a SQLite tracking store in WAL mode commit without
    an fsync each (``PRAGMA synchronous=NORMAL``, SQLite's advice for WAL).

    A short trial's run costs three MLflow transactions; at SQLite's default (FULL) each
    commit fsyncs the log, which doubles the wall time of a worker's MLflow writes here
    (measured: 48 -> 25 ms a run, 12 -> 9 ms of CPU). At NORMAL a commit survives a killed
    process as before; a power cut may take the last commits before the log's next fsync,
    never the store itself. MLflow opens the connections, so the pragma is set from
    SQLAlchemy's ``connect`` event, for this store's file only and only in WAL mode (which
    :class:`~hpsearch.tracking.StudyTracker` sets).
    """
    if not uri.startswith("sqlite:///"):
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not _normal_sync:
        event.listen(Engine, "connect", _on_connect)
    _normal_sync.add(os.path.realpath(uri.removeprefix("sqlite:///")))


def _on_connect(connection: Any, _record: Any) -> None:
    if not isinstance(connection, sqlite3.Connection):
        return
    main = [row[2] for row in connection.execute("PRAGMA database_list") if row[1] == "main"]
    if not main or os.path.realpath(main[0]) not in _normal_sync:
        return
    mode = connection.execute("PRAGMA journal_mode").fetchone()
    if mode and str(mode[0]).lower() == "wal":
        connection.execute("PRAGMA synchronous=NORMAL")


def check_reachable(uri: str, *, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when a tracking server does not answer."""
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.error
    import urllib.request

    from hpsearch.storage import redact

    url = uri.rstrip("/") + "/health"
    shown = redact(uri)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            if resp.status != 200:
                raise TrackingError(
                    f"MLflow tracking server {shown} answered {resp.status} on /health"
                )
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackingError(f"MLflow tracking server {shown} is unreachable: {reason}") from None


def fail_fast_http() -> None:
    """Let MLflow's HTTP client fail at once instead of retrying for minutes (its default).

    For the processes whose writes go through :class:`~hpsearch.tracking.TrialRun`: it keeps
    what failed and retries on its own schedule (at most 10 s apart), so a server that comes
    back is written to within seconds. Set the variables yourself to choose otherwise.
    """
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
