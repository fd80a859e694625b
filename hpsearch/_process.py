"""How a process of hpsearch lives and ends: the background threads it shares, how quickly
a waiting thread gets the GIL, and ending quickly once what must outlive it is written.

This module imports nothing from hpsearch: every room may use it.
"""

from __future__ import annotations

import atexit
import gc
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


_registered = False


def freeze_heap_at_exit() -> None:
    """Let this process end without walking its whole heap again (a worker, or the
    ``hpsearch`` command).

    A process that has imported torch, MLflow and pandas holds millions of objects; the
    collections Python runs as it shuts down walk them all: 0.5 to 1 s of CPU for each
    worker here, and over 4 s for four packed workers sharing two cores, whose nannies then
    killed them with a warning. At exit the heap is frozen (``gc.freeze``): that frees and
    stops nothing (the exit handlers, the logging shutdown and the flushing of open files
    run as before), it only keeps the shutdown's collections off it, and the operating
    system takes the memory back at once. What must outlive a worker is written before: the
    study flushes every worker's MLflow writes, and syncs its journal, before it closes the
    cluster.
    """
    global _registered
    if not _registered:
        _registered = True
        atexit.register(gc.freeze)
