"""Imports a process will need, done in the background while it waits for something else.

A study's start is a chain of waits: the coordinator starts the cluster, then opens the
MLflow store, then hands out the first trials; each worker, on its first trial, imports
torch, the objective's module and MLflow's SQL store (about 1.5, 0.5 and 1 s of CPU here)
while the study is already running. Run one after the other, these leave a core idle at
every step. :func:`start` runs such imports on a daemon thread instead: a worker's preload
starts the ones every trial needs, and the coordinator, once the cluster is up, asks each
worker for the ones its study needs (:func:`warm_workers`), while it opens the MLflow store
itself. One thread runs them in order, and whoever needs them first waits (:func:`wait`):
the same package imported on two threads at once can leave one of them a half-initialised
module. A failed import is tried again by the trial, which reports it as it would have.

This module imports nothing from hpsearch at import time.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["start", "wait", "warm_workers"]

_cond = threading.Condition()
_jobs: collections.deque[Callable[[], object]] = collections.deque()
_busy = False


def start(jobs: Sequence[Callable[[], object]]) -> None:
    """Queue ``jobs`` for this process's warm-up thread; their errors are dropped.

    One thread runs them all, in order: two threads importing the same package at once can
    each see the other's half-initialised module (Python breaks the lock cycle that way).
    """
    global _busy
    with _cond:
        _jobs.extend(jobs)
        if not _busy and _jobs:
            _busy = True
            threading.Thread(target=_work, name="hpsearch-warm-up", daemon=True).start()


def _work() -> None:
    global _busy
    while True:
        with _cond:
            if not _jobs:
                _busy = False
                _cond.notify_all()
                return
            job = _jobs.popleft()
        with contextlib.suppress(BaseException):
            job()


def wait(timeout: float = 120.0) -> None:
    """Wait until the queued jobs are done (at most ``timeout`` seconds)."""
    with _cond:
        _cond.wait_for(lambda: not _busy, timeout)


def _import(name: str) -> Callable[[], object]:
    import importlib

    return lambda: importlib.import_module(name)


def _warm_worker(
    objective: str | None, search_paths: Sequence[str], modules: Sequence[str]
) -> None:
    """Run on each worker (through ``Client.run``): start importing what its trials need."""
    jobs = [_import(name) for name in modules]
    if objective is not None:
        from hpsearch._imports import load_user_objective

        jobs.append(lambda: load_user_objective(objective, search_paths))
    start(jobs)


def warm_workers(
    client: Any,
    *,
    built_in: bool,
    objective: str | None,
    search_paths: Sequence[str],
    mlflow_uri: str,
) -> None:
    """Ask every worker now in the cluster to import what this study's trials need: torch
    and hpsearch's training code for a built-in model, the module of a user objective named
    ``package.module:function``, MLflow's SQL store for a database URI.

    Returns at once (the workers import in the background); workers that join later import
    on their first trial, as they would anyway.
    """
    modules = ["torch", "hpsearch.models", "hpsearch.data", RUNNER_TRAINERS] if built_in else []
    if mlflow_uri.startswith(("sqlite:", "postgresql", "mysql", "mssql")):
        modules.append("mlflow.store.tracking.sqlalchemy_store")
    if not modules and objective is None:
        return
    with contextlib.suppress(Exception):
        client.run(_warm_worker, objective, [str(p) for p in search_paths], modules)


RUNNER_TRAINERS = "hpsearch.training._trainers"
