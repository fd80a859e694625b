"""The background writer: one thread per process that makes the MLflow writes in order,
keeping and retrying those that fail."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("hpsearch.tracking")


class _Writer:
    """Runs tracking operations in order on one thread; keeps and retries those that fail."""

    def __init__(self) -> None:
        self._ops: collections.deque[Callable[[], None]] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.last_error: str | None = None

    def submit(self, op: Callable[[], None]) -> None:
        with self._cond:
            self._ops.append(op)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="hpsearch-mlflow", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _loop(self) -> None:
        delay = 0.5
        while True:
            with self._cond:
                while not self._ops:
                    self._cond.wait()
                op = self._ops[0]
            try:
                op()
            except Exception as exc:  # the store is down or failing: keep the op, retry later
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.failures == 1 or self.failures % 20 == 0:
                    log.warning("MLflow write failed (%s); kept, will retry", self.last_error)
                with self._cond:
                    self._cond.notify_all()
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = 0.5
            with self._cond:
                self._ops.popleft()
                self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._ops)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every operation is written (or ``timeout``); return how many are left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._ops:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining if remaining is not None else 1.0)
            return len(self._ops)


#: This process's writer.
writer = _Writer()


def flush(timeout: float | None = 120.0) -> int:
    """Wait for this process's pending MLflow writes; return how many could not be written."""
    return writer.flush(timeout)
