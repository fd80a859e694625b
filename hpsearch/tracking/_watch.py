"""Tells the user when a tracking server stops answering during a study, and comes back."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from hpsearch.exceptions import TrackingError
from hpsearch.tracking._client import check_reachable

log = logging.getLogger("hpsearch.tracking")


class ServerWatch:
    """Tells the user, once each way, when a tracking server stops answering and comes back.

    Trials go on meanwhile: their writes are kept and retried (see
    :class:`~hpsearch.tracking.TrialRun`).
    """

    def __init__(self, uri: str, *, interval: float = 5.0) -> None:
        self.uri = uri
        self.interval = interval
        self.down_since: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ServerWatch:
        if self.uri.startswith(("http://", "https://")):
            self._thread = threading.Thread(
                target=self._loop, name="hpsearch-mlflow-watch", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                check_reachable(self.uri, timeout=self.interval)
            except TrackingError as exc:
                if self.down_since is None:
                    self.down_since = time.monotonic()
                    log.warning("%s; trials go on, their MLflow writes are kept and retried", exc)
                continue
            if self.down_since is not None:
                log.warning(
                    "MLflow tracking server %s answers again after %.0f s; "
                    "the kept writes are being made",
                    self.uri,
                    time.monotonic() - self.down_since,
                )
                self.down_since = None
