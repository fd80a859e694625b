"""Where a trial logs, one MLflow client per URI, a server's health, and MLflow's limits."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch.exceptions import TrackingError

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: MLflow run status for each final Optuna state.
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "FINISHED", "FAIL": "FAILED"}
#: The MLflow status of a trial a scheduler paused (it runs again, or ends PRUNED, later).
PAUSED_STATUS = "SCHEDULED"
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


def get_client(uri: str) -> MlflowClient:
    """One ``MlflowClient`` per process and URI (the SQLite engine is built once)."""
    with _clients_lock:
        client = _clients.get(uri)
        if client is None:
            from mlflow import MlflowClient

            client = _clients[uri] = MlflowClient(tracking_uri=uri, registry_uri=uri)
        return client


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
