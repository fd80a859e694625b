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


#: Seconds a thread may hold the GIL while another waits for it (Python's default: 5 ms).
SWITCH_INTERVAL = 0.001


def quick_switches() -> float:
    """Let a thread that waits for the GIL have it within 1 ms instead of 5; return the
    interval that was in force (to restore it).

    A worker's MLflow writer runs a finished trial's writes (about 12 ms of Python) while the
    next trial runs; the coordinator's process holds the Dask scheduler, the client, the
    storage proxy's threads and the ask / tell loop. Each time one of them wakes from a
    socket (a proxy call's answer, a task, a result) while another thread is in Python, it
    waits for the holder's switch interval: up to 5 ms a wake-up, several times a trial. At
    1 ms the waits are a fifth, for a few hundred more switches a second (microseconds each).
    """
    import sys

    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL))
    return before
