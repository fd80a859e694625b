"""A Dask worker preload: import what trials need before the first trial arrives.

A worker pays ``import mlflow`` (about 2 s here) and optuna's gRPC client once; without this,
the first trial on every worker pays it, while the study is already running. They load on
a background thread (:mod:`hpsearch.worker.warm`), so the worker is ready at once. It also sets
glibc's allocator up for training (:func:`hpsearch.cluster._env.tune_allocator`), leaves
Ctrl-C to the coordinator, which stops the trials and closes the cluster in order, and it
ends the worker when its nanny (the coordinator, for the local cluster) is gone. The local
cluster and ``hpsearch worker`` load it; for plain ``dask worker`` pass
``--preload hpsearch.preload``. Importing torch is left to the study: it asks its workers
to import what its trials need once the cluster is up (a user objective may not need it).
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


#: Why a trial yields when its worker's batch job is about to end.
JOB_ENDS = "its SLURM job ends (walltime or preemption)"


def _job_ends(worker: Any) -> None:
    """SIGUSR1: the worker's batch job ends soon (SLURM's ``--signal``, forwarded by
    ``hpsearch worker``). Its trials yield at their next safe point, their checkpoints
    written (they resume on another worker, losing no epoch), and their outcomes say that the
    worker goes away: the coordinator retires it as it hears of them, so no trial lands on it
    again. Dask's own retirement cannot wait for them: it moves a worker's data, not its
    running tasks, which it would start again elsewhere from scratch. An idle worker retires
    at once."""
    from hpsearch.trial import job_ending

    if job_ending(JOB_ENDS) == 0:
        worker.loop.add_callback(worker.close_gracefully, reason="its batch job ends")


def retire(dask_worker: Any) -> None:
    """Run by the coordinator on a worker whose batch job ends, once its trials have yielded:
    it stops taking tasks and closes."""
    dask_worker.loop.add_callback(dask_worker.close_gracefully, reason="its batch job ends")


def dask_setup(worker: Any) -> None:
    import os
    import signal
    import threading
    import warnings

    from hpsearch.cluster import tune_allocator

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
        signal.signal(signal.SIGUSR1, lambda *_: _job_ends(worker))

    import logging

    logging.getLogger("distributed.worker").addFilter(_QuietWhileClosing(worker))

    import optuna

    import hpsearch.tracking
    from hpsearch._process import freeze_heap_at_exit, quick_switches
    from hpsearch.worker import warm

    hpsearch.tracking.fail_fast_http()
    quick_switches()  # the trial's calls are not kept waiting by the MLflow writer
    freeze_heap_at_exit()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    # The worker says it is ready at once; what every trial imports loads meanwhile, and
    # the study adds what its own trials need (hpsearch.worker.warm says why).
    warm.start([_import("mlflow"), _import("optuna.storages"), _import(RUNNER)])


RUNNER = "hpsearch.worker._runner"


def _import(name: str) -> Any:
    import importlib

    return lambda: importlib.import_module(name)
