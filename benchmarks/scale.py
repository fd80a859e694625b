"""The orchestrator's own limit: a trivial-objective study on 1, 2 and 4 worker processes,
the study in a journal file or in PostgreSQL, reached through the coordinator's gRPC
storage proxy or (PostgreSQL) by the workers directly.

Prints trials/s and the coordinator's cost per trial (wall time of the optimisation phase,
until every MLflow write has landed, divided by the trials), with plain Optuna in one process
on the same storages for comparison. Needs the local PostgreSQL (postgres@127.0.0.1:5432,
trust auth); its rows are left out without it.

    python benchmarks/scale.py [--n-trials 500] [--workers 1,2,4]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine, table, timer

from hpsearch.testing.objectives import trivial

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")
ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def new_database() -> str | None:
    try:
        import psycopg

        name = f"hps_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(ADMIN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name
    except Exception as exc:
        print(f"no PostgreSQL ({exc}); its rows are left out", file=sys.stderr)
        return None


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def plain(n: int, storage: str) -> float:
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
    with timer() as t:
        study.optimize(trivial, n_trials=n)
    return t[0]


def hpsearch_run(n: int, folder: Path, workers: int, storage: str | None, access: str) -> float:
    from hpsearch import Study

    spec = {
        "name": f"scale-{workers}-{access}-{uuid.uuid4().hex[:6]}",
        "objective": {"model": "hpsearch.testing.objectives:trivial", "direction": "minimize"},
        "space": {
            "x": {"type": "float", "low": -10.0, "high": 10.0},
            "y": {"type": "float", "low": -10.0, "high": 10.0},
        },
        "search": {"n_trials": n, "sampler": "tpe", "pruner": "none", "seed": 0},
        "cluster": {"n_workers": workers, "slots": workers, "storage_access": access},
    }
    if storage:
        spec["storage"] = storage
    result = Study(spec, run_dir=folder / "runs").run(progress=False)
    p = result.progress
    assert p.complete == n, p
    return p.tracked - p.started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trials", type=int, default=500)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    n = args.n_trials
    counts = [int(w) for w in args.workers.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-scale-"))
    db = new_database()
    pg = f"postgresql+psycopg://postgres@127.0.0.1:5432/{db}" if db else None
    rows = []
    try:
        journal_plain = plain(
            n,
            optuna.storages.JournalStorage(
                optuna.storages.journal.JournalFileBackend(str(folder / "plain.journal"))
            ),
        )
        rows.append(
            (
                "plain Optuna",
                1,
                "journal file, in process",
                f"{n / journal_plain:.1f}",
                f"{1000 * journal_plain / n:.1f}",
            )
        )
        if pg:
            pg_plain = plain(n, pg)
            rows.append(
                (
                    "plain Optuna",
                    1,
                    "PostgreSQL, in process",
                    f"{n / pg_plain:.1f}",
                    f"{1000 * pg_plain / n:.1f}",
                )
            )
        for workers in counts:
            setups = [("journal file", None, "proxy")]
            if pg:
                setups += [("PostgreSQL", pg, "proxy"), ("PostgreSQL", pg, "direct")]
            for label, storage, access in setups:
                loop = hpsearch_run(n, folder, workers, storage, access)
                how = "gRPC proxy" if access == "proxy" else "workers direct"
                rows.append(
                    (
                        "hpsearch, MLflow on",
                        workers,
                        f"{label}, {how}",
                        f"{n / loop:.1f}",
                        f"{1000 * loop / n:.1f}",
                    )
                )
                print(f"done: {workers} workers, {label}, {how}", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if db:
            drop_database(db)
    print(f"\n{n} trivial trials, TPE — {machine()}\n")
    print(table(["setup", "worker processes", "study storage", "trials/s", "ms/trial"], rows))


if __name__ == "__main__":
    main()
