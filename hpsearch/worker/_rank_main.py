"""The main loop of a rank process: connect to the worker, run the trials it hands over."""

from __future__ import annotations

import os
import threading
import time
import traceback
from multiprocessing.connection import Client

from hpsearch.cluster import release_memory, tune_allocator
from hpsearch.worker._ranks import (
    ENV_ADDRESS,
    ENV_AUTHKEY,
    ENV_PARENT,
    ENV_TRACKS,
    die_with_parent,
)


def _watch_parent(parent: int) -> None:
    """Exit when the worker that started this rank is gone (orphaned ranks hold devices)."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def main() -> None:
    parent = int(os.environ[ENV_PARENT])
    die_with_parent()  # and if the worker died before that, the watch below sees it at once
    tune_allocator()  # hpsearch.cluster._env says why
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    # Import what every trial needs before saying hello: a trial's time limit then counts the
    # trial, not the start-up, and the trial's threads (MLflow's writer among them) never
    # race each other importing the same modules. Only rank 0 logs to MLflow (about 1.5 s of
    # CPU to import); a process that later becomes rank 0 imports it then (run_rank).
    if os.environ.get(ENV_TRACKS) != "0":
        import mlflow  # noqa: F401
    import torch
    import torch.distributed  # noqa: F401

    import hpsearch.tracking
    from hpsearch.worker._rank_trial import run_rank

    hpsearch.tracking.fail_fast_http()

    host, port = os.environ[ENV_ADDRESS].rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[ENV_AUTHKEY]))
    conn.send({"pid": os.getpid()})

    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind != "trial":
            continue
        try:
            result = run_rank(payload)
            release_memory()
            conn.send(("done", result, None))
        except BaseException as exc:  # reported to the worker, which ends the trial
            text = f"rank {payload.get('rank')}: {type(exc).__name__}: {exc}"
            try:
                conn.send(("done", None, text + "\n" + traceback.format_exc()))
            except (EOFError, OSError):
                return


if __name__ == "__main__":
    main()
