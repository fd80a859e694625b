"""A Dask worker preload: import what trials need before the first trial arrives.

A worker pays ``import mlflow`` (about 2 s here) and optuna's gRPC client once; without this,
the first trial on every worker pays it, while the study is already running. It also sets
glibc's allocator up for training (:func:`hpsearch.cluster._env.tune_allocator`), leaves
Ctrl-C to the coordinator, which stops the trials and closes the cluster in order, and it
ends the worker when its nanny (the coordinator, for the local cluster) is gone. The local
cluster and ``hpsearch worker`` load it; for plain ``dask worker`` pass
``--preload hpsearch.preload``. Importing torch is left to the first trial that trains
(a user objective may not need it).
"""

from __future__ import annotations

from typing import Any


def _watch_parent(parent: int) -> None:
    """Exit when the process that started this worker (its nanny) is gone.

    A coordinator killed with SIGKILL (or its machine's OOM killer) cannot stop its local
    workers; without this they would keep training trials that the next coordinator runs
    again. The worker's rank processes follow it (they watch the worker the same way).
    """
    import os
    import time

    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


class _QuietWhileClosing:
    """Drop the worker's heartbeat tracebacks once it is closing.

    A cluster closing while a trial still runs (Ctrl-C, the end of a study) closes the
    scheduler's side of the heartbeat before the busy worker has stopped; Dask logs the
    broken heartbeat with a full traceback, though nothing is wrong. While the worker runs,
    the same message still gets through: then the scheduler is really gone.
    """

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def filter(self, record: Any) -> bool:
        from distributed.core import Status

        heartbeat = str(record.msg).startswith("Failed to communicate with scheduler")
        return not (heartbeat and self.worker.status != Status.running)


def dask_setup(worker: Any) -> None:
    import os
    import signal
    import threading
    import warnings

    from hpsearch.cluster._env import tune_allocator

    tune_allocator()  # before a trial allocates anything (hpsearch.cluster._env says why)

    parent = os.getppid()
    if parent != 1:
        threading.Thread(
            target=_watch_parent, args=(parent,), name="hpsearch-parent-watch", daemon=True
        ).start()

    # A terminal's Ctrl-C reaches the whole process group: the coordinator stops the trials
    # and closes the cluster; a worker dying of it on its own would only print a traceback.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    import logging

    logging.getLogger("distributed.worker").addFilter(_QuietWhileClosing(worker))

    import mlflow  # noqa: F401
    import optuna
    from optuna.storages import GrpcStorageProxy  # noqa: F401

    import hpsearch.tracking
    import hpsearch.training._runner
    from hpsearch._threads import quick_switches

    hpsearch.tracking.fail_fast_http()
    quick_switches()  # the trial's calls are not kept waiting by the MLflow writer

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
