"""A worker's MLflow writes for short trials, in one process: CPU and SQL statements a run.

Each run is written as a worker writes a trial that ends before its first write (the usual
case for short trials): ``create_run`` with the trial's tags and its final name, one
``log_batch`` with its parameters, ``set_terminated``. The writes run on the calling thread
(not the writer thread), so that the thread CPU time of each client call can be taken.

    python benchmarks/tracking_writes.py [--runs 300] [--profile FILE.prof]

The SQLite store is made as ``hpsearch run`` makes it (a copy of the empty template, WAL
mode, ``synchronous=NORMAL`` on the process's connections).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--profile", help="write a cProfile of the timed runs to this file")
    args = p.parse_args()

    import mlflow
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from hpsearch.tracking import StudyTracker, TrialRun, find_trial_runs, tag
    from hpsearch.tracking import _trial_run as trial_run
    from hpsearch.tracking._client import get_client, seed_sqlite_store
    from hpsearch.tracking._study_run import _sqlite_wal

    ops: list[Any] = []

    class _OnThisThread:
        def submit(self, op: Any) -> None:
            ops.append(op)

    trial_run.writer = _OnThisThread()  # type: ignore[assignment]

    uri = f"sqlite:///{Path(tempfile.mkdtemp()) / 'mlflow.db'}"
    seed_sqlite_store(uri)
    _sqlite_wal(uri)  # before the process's first connection, as on a worker
    target = StudyTracker(uri, "exp", "s", metric="value", artifact_root=None).open(
        storage_url="journal://x", tags={}, spec_yaml="a: 1"
    )
    client = get_client(uri)

    cpu: collections.Counter[str] = collections.Counter()
    statements: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    connects = [0]
    current: list[str | None] = [None]

    for name in ("create_run", "log_batch", "set_terminated"):
        original = getattr(mlflow.MlflowClient, name)

        def timed(*a: Any, _original: Any = original, _name: str = name, **k: Any) -> Any:
            start = time.thread_time()
            current[0] = _name
            try:
                return _original(*a, **k)
            finally:
                cpu[_name] += time.thread_time() - start
                current[0] = None

        setattr(mlflow.MlflowClient, name, timed)

    @event.listens_for(Engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements[current[0] or "?"] += 1
        kinds[" ".join(statement.split())[:60]] += 1

    @event.listens_for(Engine, "connect")
    def _connect(*a: Any) -> None:
        connects[0] += 1

    def one(number: int) -> None:
        run = TrialRun(
            target,
            number,
            tags={
                tag.WORKER: "tcp://127.0.0.1:40000",
                tag.PID: 1234,
                tag.DEVICES: "cpu:0",
                tag.WORLD_SIZE: 1,
                tag.ATTEMPT: 1,
            },
            resume=False,
        )
        run.log_params({"x": 0.1 * number, "y": 0.2, "z": 0.3})
        run.finish("COMPLETE")
        while ops:
            ops.pop(0)()

    for number in range(20):  # warm: SQLAlchemy's statement cache, the pool's connection
        one(number)
    cpu.clear()
    statements.clear()
    kinds.clear()
    connects[0] = 0
    profile = cProfile.Profile() if args.profile else None
    wall, start = time.perf_counter(), time.thread_time()
    if profile is not None:
        profile.enable()
    for number in range(20, 20 + args.runs):
        one(number)
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    n = args.runs
    total = time.thread_time() - start
    print(
        f"{n} runs: {1e3 * total / n:.2f} ms CPU a run "
        f"({1e3 * (time.perf_counter() - wall) / n:.2f} ms wall), "
        f"{sum(statements.values()) / n:.1f} SQL statements a run, "
        f"{connects[0]} new connections"
    )
    for name in ("create_run", "log_batch", "set_terminated"):
        calls = statements[name] / n
        print(f"  {name:15s} {1e3 * cpu[name] / n:6.2f} ms CPU  {calls:5.1f} statements")
    print("  statements a run, by kind:")
    for text, count in kinds.most_common():
        print(f"    {count / n:5.2f}  {text}")
    start = time.thread_time()
    found = find_trial_runs(client, target)
    print(
        f"reading them back (find_trial_runs, {len(found)} runs): "
        f"{1e3 * (time.thread_time() - start) / len(found):.2f} ms CPU a run"
    )


if __name__ == "__main__":
    main()
