"""A worker's MLflow writes for short trials, in one process: CPU and SQL statements a run.

Each run is written as a worker writes a trial that ends before its first write (the usual
case for short trials), both ways side by side, in alternating rounds: hpsearch's one
transaction of MLflow's SQL store (``hpsearch.tracking._sql_store``), and the plain
alternative, MLflow's client (``create_run`` with the trial's tags and its final name, one
``log_batch`` with its parameters and metrics, ``set_terminated``). The writes run on the
calling thread (not the writer thread), so that the thread CPU time can be taken.

    python benchmarks/tracking_writes.py [--runs 300] [--metrics 0] [--profile FILE.prof]

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
    p.add_argument("--metrics", type=int, default=0, help="metric values a run (default 0)")
    p.add_argument(
        "--profile", help="write a cProfile of the one-transaction path's runs to this file"
    )
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

    def one(number: int, path: str) -> None:
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
        run._whole = path == "one transaction"
        run.log_params({"x": 0.1 * number, "y": 0.2, "z": 0.3})
        for step in range(args.metrics):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step)
        run.finish("COMPLETE")
        while ops:
            ops.pop(0)()

    paths = ["client calls", "one transaction"]
    number = 0
    for path in paths:  # warm: SQLAlchemy's statement cache, the pool's connection
        for _ in range(20):
            one(number, path)
            number += 1
    cpu.clear()
    statements.clear()
    kinds.clear()
    connects[0] = 0
    total: collections.Counter[str] = collections.Counter()
    wall: collections.Counter[str] = collections.Counter()
    per_path: dict[str, collections.Counter[str]] = {p: collections.Counter() for p in paths}
    profile = cProfile.Profile() if args.profile else None
    rounds = 6
    per_round = max(1, args.runs // rounds)
    for _ in range(rounds):  # the two paths alternate, so that a change of load hits both
        for path in paths:
            before = collections.Counter(statements)
            w, start = time.perf_counter(), time.thread_time()
            if profile is not None and path == "one transaction":
                profile.enable()
            for _ in range(per_round):
                one(number, path)
                number += 1
            if profile is not None:
                profile.disable()
            total[path] += time.thread_time() - start
            wall[path] += time.perf_counter() - w
            per_path[path].update(statements - before)
    if profile is not None:
        profile.dump_stats(args.profile)
    n = rounds * per_round
    print(
        f"{n} runs a path, {args.metrics} metric values a run, in {rounds} alternating rounds; "
        f"{connects[0]} new connections"
    )
    labels = {
        "client calls": "MLflow client: create_run, log_batch, set_terminated",
        "one transaction": "hpsearch: one transaction of MLflow's SQL store",
    }
    head = "a short trial's run"
    print(f"| {head:55s} | CPU ms a run | wall ms a run | SQL statements a run |")
    print(f"|{'-' * 57}|--------------|---------------|----------------------|")
    for path in paths:
        print(
            f"| {labels[path]:55s} | {1e3 * total[path] / n:12.2f} | {1e3 * wall[path] / n:13.2f} "
            f"| {sum(per_path[path].values()) / n:20.1f} |"
        )
    print("client calls, by call:")
    for name in ("create_run", "log_batch", "set_terminated"):
        calls = statements[name] / n
        print(f"  {name:15s} {1e3 * cpu[name] / n:6.2f} ms CPU  {calls:5.1f} statements")
    print("statements a run (both paths), by kind:")
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
