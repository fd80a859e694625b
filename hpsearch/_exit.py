"""How a process of hpsearch ends: quickly, once what must outlive it is written.

This module imports nothing from hpsearch.
"""

from __future__ import annotations

import atexit
import gc

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
