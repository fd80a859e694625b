"""The orchestration's own cost per trial: hpsearch against Optuna + DaskStorage and the floor.

Every setup runs as its own command, the way a user runs it, on a trivial user objective
(three ``suggest_float``, no training), TPE, 2 worker processes:

- **floor**: the bare ask/tell loop over Dask futures (the coordinator asks TPE, submits
  the objective with the asked parameters, tells the result; journal file, no MLflow): the
  least any design with one sampling coordinator can cost;
- **Optuna + DaskStorage**: ``study.optimize`` on each of the 2 workers of a
  ``LocalCluster``, the study in ``optuna_integration.DaskStorage`` (SQLite), no MLflow;
- **hpsearch**: ``hpsearch run study.yaml`` (MLflow on: every trial a complete child run
  by the time the command returns).

The cost per trial is (wall of a LARGE-trial study - wall of a SMALL-trial study) /
(LARGE - SMALL): start-up, imports and the final drain cancel out, and whatever grows with
the trial count stays in. Each pair is repeated (``--repeat``), the setups interleaved so
that a busy machine hurts them alike; the table shows the median and the spread.

``--growth N`` also runs one N-trial study of each setup and reports the cost of the first
and the last 200 trials (from the trials' completion times in the study), and TPE's own ask
time at those two history sizes (measured apart, in one process), so that the growth can be
split into TPE's and the orchestration's.

    python benchmarks/overhead.py [--small 20] [--large 220] [--repeat 3] [--growth 2000]
        [--setups floor,dask,hpsearch] [--baseline DIR]

The CPU columns are user + system seconds of each command's whole process tree, taken the
same way (difference of the two budgets): on a shared machine they move far less than wall.

Needs ``pip install optuna-integration`` for the DaskStorage row.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table

OBJECTIVE = """\
def objective(trial):
    x = trial.suggest_float("x", -10.0, 10.0)
    y = trial.suggest_float("y", -10.0, 10.0)
    z = trial.suggest_float("z", -10.0, 10.0)
    return (x - 2.0) ** 2 + (y + 1.0) ** 2 + z**2
"""

STUDY = """\
name: overhead
objective:
  model: user_objective:objective
  direction: minimize
search:
  n_trials: 20
  sampler: tpe
  pruner: none
  seed: 0
cluster:
  n_workers: {n_workers}
"""

WINDOW = 200  # trials per window of the growth report


# ------------------------------------------------------------------ the peers, as commands


def _objective(trial: Any) -> float:
    x = trial.suggest_float("x", -10.0, 10.0)
    y = trial.suggest_float("y", -10.0, 10.0)
    z = trial.suggest_float("z", -10.0, 10.0)
    return (x - 2.0) ** 2 + (y + 1.0) ** 2 + z**2


def _value(params: dict[str, float]) -> float:
    return (params["x"] - 2.0) ** 2 + (params["y"] + 1.0) ** 2 + params["z"] ** 2


def _cluster(n_workers: int) -> Any:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
    )


def _optimize_chunk(storage: Any, study_name: str, n: int) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=optuna.samplers.TPESampler()
    )
    study.optimize(_objective, n_trials=n)
    return n


def peer_dask(n_trials: int, folder: Path, n_workers: int) -> None:
    import optuna
    from distributed import Client, wait
    from optuna_integration import DaskStorage

    with _cluster(n_workers) as cluster, Client(cluster) as client:
        storage = DaskStorage(f"sqlite:///{folder / 'dask.db'}", client=client)
        study = optuna.create_study(
            study_name="overhead", storage=storage, sampler=optuna.samplers.TPESampler(seed=0)
        )
        per = [n_trials // n_workers + (i < n_trials % n_workers) for i in range(n_workers)]
        futures = [
            client.submit(_optimize_chunk, storage, study.study_name, n, pure=False) for n in per
        ]
        wait(futures)
        assert sum(f.result() for f in futures) == n_trials


def peer_floor(n_trials: int, folder: Path, n_workers: int) -> None:
    import optuna
    from distributed import Client, as_completed
    from optuna.distributions import FloatDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    space = {k: FloatDistribution(-10.0, 10.0) for k in "xyz"}
    storage = JournalStorage(JournalFileBackend(str(folder / "floor.journal")))
    study = optuna.create_study(
        study_name="overhead",
        storage=storage,
        sampler=optuna.samplers.TPESampler(seed=0, multivariate=True, constant_liar=True),
    )
    with _cluster(n_workers) as cluster, Client(cluster) as client:
        finished = as_completed(with_results=True)
        asked = 0
        for _ in range(min(n_workers, n_trials)):
            trial = study.ask(space)
            finished.add(client.submit(_value, trial.params, key=f"t{trial.number}"))
            asked += 1
        numbers = {}
        for future, value in finished:
            number = int(future.key[1:])
            numbers[number] = value
            if asked < n_trials:
                trial = study.ask(space)
                finished.add(client.submit(_value, trial.params, key=f"t{trial.number}"))
                asked += 1
            study.tell(number, value)
    assert len(numbers) == n_trials


# ------------------------------------------------------------------ one timed command


#: Another checkout of hpsearch to run as the "before" row (--baseline DIR), if any.
BASELINE: Path | None = None


def _env(root: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    root = root or Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return env


def _hpsearch_command(n_trials: int, folder: Path, n_workers: int) -> tuple[list[str], Path]:
    (folder / "user_objective.py").write_text(OBJECTIVE)
    (folder / "study.yaml").write_text(STUDY.format(n_workers=n_workers))
    exe = shutil.which("hpsearch") or "hpsearch"
    return [exe, "run", "study.yaml", "--n-trials", str(n_trials), "--run-dir", "runs"], folder


def timed(
    setup: str, n_trials: int, n_workers: int, keep: Path | None = None
) -> tuple[float, float]:
    """Wall seconds and CPU seconds of one command that runs a fresh ``n_trials`` study of
    ``setup``.

    The CPU time is user + system of the whole process tree (the command, its Dask
    scheduler, workers and nannies: every descendant is waited for by its parent, so the
    kernel adds it to this process's children's usage). It moves far less with the load of
    a shared machine than the wall time does.
    """
    folder = Path(tempfile.mkdtemp(prefix=f"hpsearch-overhead-{setup}-"))
    try:
        if setup in ("hpsearch", "baseline"):
            cmd, cwd = _hpsearch_command(n_trials, folder, n_workers)
        else:
            cmd = [sys.executable, __file__, "--peer", setup, "--n-trials", str(n_trials)]
            cmd += ["--n-workers", str(n_workers), "--folder", str(folder)]
            cwd = folder
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        env = _env(BASELINE if setup == "baseline" else None)
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{setup} ({n_trials} trials) failed:\n{done.stdout}\n{done.stderr}")
        if setup in ("hpsearch", "baseline"):
            _check_hpsearch(folder, n_trials)
        if keep is not None:
            shutil.copytree(folder, keep, dirs_exist_ok=True)
        return wall, cpu
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_hpsearch(folder: Path, n_trials: int) -> None:
    """Every trial COMPLETE in the study, and its MLflow run FINISHED, when the command returned."""
    import optuna
    from mlflow import MlflowClient

    from hpsearch.storage import open_storage

    study = optuna.load_study(
        study_name="overhead",
        storage=open_storage(f"journal://{folder}/runs/overhead/optuna.journal"),
    )
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == n_trials, states
    client = MlflowClient(f"sqlite:///{folder}/runs/mlflow.db")
    exp = client.get_experiment_by_name("overhead")
    runs = client.search_runs([exp.experiment_id], max_results=50000)
    finished = [r for r in runs if r.data.tags.get("hpsearch.trial_number") is not None]
    assert len(finished) == n_trials and all(r.info.status == "FINISHED" for r in finished), (
        len(finished),
        {r.info.status for r in finished},
    )


# ------------------------------------------------------------------ growth


def _study_of(setup: str, folder: Path) -> Any:
    import optuna

    from hpsearch.storage import open_storage

    if setup in ("hpsearch", "baseline"):
        url = f"journal://{folder}/runs/overhead/optuna.journal"
    elif setup == "floor":
        url = f"journal://{folder}/floor.journal"
    else:
        url = f"sqlite:///{folder}/dask.db"
    return optuna.load_study(study_name="overhead", storage=open_storage(url))


def window_costs(setup: str, n_trials: int, n_workers: int) -> tuple[float, float]:
    """ms per trial of the first and the last WINDOW trials of one n_trials study."""
    keep = Path(tempfile.mkdtemp(prefix=f"hpsearch-growth-{setup}-"))
    try:
        timed(setup, n_trials, n_workers, keep=keep)
        done = sorted(t.datetime_complete for t in _study_of(setup, keep).trials)
        first = (done[WINDOW] - done[0]).total_seconds()
        last = (done[-1] - done[-1 - WINDOW]).total_seconds()
        return 1000 * first / WINDOW, 1000 * last / WINDOW
    finally:
        shutil.rmtree(keep, ignore_errors=True)


def tpe_ask_ms(history: int, repeats: int = 20) -> float:
    """TPE's own ask + sample time (ms) with ``history`` complete trials, in one process."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=0, multivariate=True, constant_liar=True)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(_objective, n_trials=history)
    study.sampler = sampler
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        trial = study.ask()
        _objective(trial)
        times.append(time.perf_counter() - start)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return 1000 * statistics.median(times)


# ------------------------------------------------------------------ main


SETUPS = {
    "floor": "floor: ask/tell over Dask futures, journal, no MLflow",
    "dask": "Optuna + DaskStorage (SQLite), no MLflow",
    "hpsearch": "hpsearch run, MLflow on",
    "baseline": "hpsearch run, MLflow on, from --baseline",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=220)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n-workers", type=int, default=2)
    parser.add_argument("--growth", type=int, default=0, help="also run one study this long")
    parser.add_argument("--setups", default="floor,dask,hpsearch")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of hpsearch (e.g. from git worktree add): its `hpsearch run` "
        "is one more row, run interleaved with the others",
    )
    parser.add_argument("--peer", choices=["floor", "dask"], help=argparse.SUPPRESS)
    parser.add_argument("--n-trials", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        warnings.filterwarnings("ignore")
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        (peer_floor if args.peer == "floor" else peer_dask)(
            args.n_trials, args.folder, args.n_workers
        )
        return

    setups = args.setups.split(",")
    if args.baseline is not None:
        global BASELINE
        BASELINE = args.baseline.resolve()
        setups.append("baseline")
    walls: dict[tuple[str, int], list[float]] = {(s, n): [] for s in setups for n in (0, 1)}
    cpus: dict[tuple[str, int], list[float]] = {(s, n): [] for s in setups for n in (0, 1)}
    load = [os.getloadavg()[0]]
    for r in range(args.repeat):
        for setup in setups:
            for i, n in enumerate((args.small, args.large)):
                wall, cpu = timed(setup, n, args.n_workers)
                walls[setup, i].append(wall)
                cpus[setup, i].append(cpu)
            load.append(os.getloadavg()[0])
            print(f"round {r + 1}: {setup} done", file=sys.stderr)
    span = args.large - args.small
    if args.repeat > 0:
        _budget_table(args, setups, walls, cpus, load, span)
    if args.growth:
        _growth_table(args.growth, setups, args.n_workers)


def _budget_table(
    args: argparse.Namespace,
    setups: list[str],
    walls: dict[tuple[str, int], list[float]],
    cpus: dict[tuple[str, int], list[float]],
    load: list[float],
    span: int,
) -> None:
    rows = []
    per: dict[str, float] = {}
    per_cpu: dict[str, float] = {}
    for setup in setups:
        costs = [
            1000 * (big - small) / span
            for small, big in zip(walls[setup, 0], walls[setup, 1], strict=True)
        ]
        cpu_costs = [
            1000 * (big - small) / span
            for small, big in zip(cpus[setup, 0], cpus[setup, 1], strict=True)
        ]
        per[setup] = statistics.median(costs)
        per_cpu[setup] = statistics.median(cpu_costs)
        rows.append(
            (
                SETUPS[setup],
                f"{statistics.median(walls[setup, 0]):.1f}",
                f"{statistics.median(walls[setup, 1]):.1f}",
                f"{per[setup]:.1f}",
                f"{min(costs):.1f}-{max(costs):.1f}",
                f"{per_cpu[setup]:.1f}",
                f"{min(cpu_costs):.1f}-{max(cpu_costs):.1f}",
            )
        )
    print(
        f"\n{args.small} vs {args.large} trivial trials (3 suggest_float), TPE, "
        f"{args.n_workers} workers, {args.repeat} rounds, load average "
        f"{min(load):.1f}-{max(load):.1f} — {machine()}\n"
    )
    head = ["setup", f"wall {args.small} s", f"wall {args.large} s", "ms/trial", "range"]
    print(table([*head, "CPU ms/trial", "CPU range"], rows))
    if "hpsearch" in per and "dask" in per:
        print(
            f"\nhpsearch / (Optuna + DaskStorage): {per['hpsearch'] / per['dask']:.2f} (wall), "
            f"{per_cpu['hpsearch'] / per_cpu['dask']:.2f} (CPU)"
        )


def _growth_table(n: int, setups: list[str], n_workers: int) -> None:
    grows = []
    for setup in setups:
        first, last = window_costs(setup, n, n_workers)
        grows.append((SETUPS[setup], f"{first:.1f}", f"{last:.1f}", f"{last - first:+.1f}"))
        print(f"growth: {setup} done", file=sys.stderr)
    early, late = tpe_ask_ms(WINDOW // 2), tpe_ask_ms(n - WINDOW // 2)
    grows.append(
        (
            f"TPE ask + 3 suggests alone, {WINDOW // 2} vs {n - WINDOW // 2} trials",
            f"{early:.1f}",
            f"{late:.1f}",
            f"{late - early:+.1f}",
        )
    )
    print(
        f"\none {n}-trial study: ms per trial of the first and the last {WINDOW} "
        f"(load average {os.getloadavg()[0]:.1f} at the end)\n"
    )
    print(table(["setup", f"trials 0-{WINDOW}", f"trials {n - WINDOW}-{n}", "growth"], grows))


if __name__ == "__main__":
    main()
