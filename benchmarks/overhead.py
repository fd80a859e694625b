"""The per-trial cost of the orchestration itself, against plain Optuna and Optuna + DaskStorage.

A trivial objective (two suggests, no training), TPE, 2 worker processes, MLflow on for
hpsearch. Prints trials/s and ms per trial of the optimisation phase (for hpsearch: until the
last MLflow write has landed); cluster start-up is shown apart: it is paid once per run,
not per trial.

    python benchmarks/overhead.py [--n-trials 200]

The DaskStorage row needs ``pip install optuna-integration``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine, table, timer

from hpsearch.testing.objectives import trivial

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")


def plain_optuna(n_trials: int, folder: Path) -> tuple[float, float]:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(folder / "plain.journal")))
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
    with timer() as t:
        study.optimize(trivial, n_trials=n_trials)
    return 0.0, t[0]


def _optimize_chunk(storage, study_name: str, n: int) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=optuna.samplers.TPESampler()
    )
    study.optimize(trivial, n_trials=n)
    return n


def dask_storage(n_trials: int, folder: Path, n_workers: int) -> tuple[float, float] | None:
    try:
        from optuna_integration import DaskStorage
    except ImportError:
        return None
    from distributed import Client, LocalCluster, wait

    with timer() as start:
        cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        )
        client = Client(cluster)
    try:
        storage = DaskStorage(f"sqlite:///{folder / 'dask.db'}", client=client)
        study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
        per = [n_trials // n_workers + (i < n_trials % n_workers) for i in range(n_workers)]
        with timer() as t:
            futures = [
                client.submit(_optimize_chunk, storage, study.study_name, n, pure=False)
                for n in per
            ]
            wait(futures)
            [f.result() for f in futures]
        assert len(study.trials) == n_trials
    finally:
        client.close()
        cluster.close()
    return start[0], t[0]


def hpsearch_run(
    n_trials: int, folder: Path, n_workers: int, *, declared_space: bool
) -> tuple[float, float]:
    from hpsearch import Study

    spec = {
        "name": f"overhead-{'space' if declared_space else 'dynamic'}",
        "objective": {"model": "hpsearch.testing.objectives:trivial", "direction": "minimize"},
        "space": {
            "x": {"type": "float", "low": -10.0, "high": 10.0},
            "y": {"type": "float", "low": -10.0, "high": 10.0},
        }
        if declared_space
        else {},
        "search": {"n_trials": n_trials, "sampler": "tpe", "pruner": "none", "seed": 0},
        "cluster": {"n_workers": n_workers},
    }
    with timer() as total:
        result = Study(spec, run_dir=folder / "runs").run()
    p = result.progress
    assert p.complete == n_trials, p
    # Per trial: from the coordinator's start until every worker's MLflow writes have landed
    # (the background writes are part of the cost, even though trials do not wait for them).
    loop = p.tracked - p.started
    return total[0] - loop, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trials", type=int, default=200)
    parser.add_argument("--n-workers", type=int, default=2)
    args = parser.parse_args()
    n = args.n_trials
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-overhead-"))
    rows = []
    try:
        for label, fn in [
            ("plain Optuna, 1 process, journal file", lambda: plain_optuna(n, folder)),
            (
                f"Optuna + DaskStorage (SQLite), {args.n_workers} workers",
                lambda: dask_storage(n, folder, args.n_workers),
            ),
            (
                f"hpsearch, MLflow on, space in spec, {args.n_workers} workers",
                lambda: hpsearch_run(n, folder, args.n_workers, declared_space=True),
            ),
            (
                f"hpsearch, MLflow on, objective suggests, {args.n_workers} workers",
                lambda: hpsearch_run(n, folder, args.n_workers, declared_space=False),
            ),
        ]:
            res = fn()
            if res is None:
                rows.append((label, "-", "-", "-", "not installed"))
                continue
            start, loop = res
            rows.append((label, f"{start:.1f}", f"{n / loop:.1f}", f"{1000 * loop / n:.1f}", ""))
            print(f"done: {label}", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{n} trivial trials, TPE — {machine()}\n")
    print(table(["setup", "start-up s", "trials/s", "ms/trial", "note"], rows))


if __name__ == "__main__":
    main()
