"""Background threads shared by a process."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_executors: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def ordered_executor(name: str) -> ThreadPoolExecutor:
    """This process's one-thread executor called ``name``: work submitted to it runs in order."""
    with _lock:
        executor = _executors.get(name)
        if executor is None:
            executor = _executors[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return executor
