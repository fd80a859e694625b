"""Search methods side by side on LCBench, on a simulated cluster, and the simulator's own speed.

    python benchmarks/simulate.py compare [--benchmark lcbench | synthetic | replay:RUN_DIR/NAME]
        [--instances 3945,7593,34539,126025,189909]
        [--seeds 20] [--workers 4,32,256] [--methods random,tpe,tpe+hyperband,asha,pbt]
        [--hours 0.25 | --budget 8] [--max-trials 1000] [--tpe-seeds N]
        [--out benchmarks/out/simulate]
    python benchmarks/simulate.py pool OUT_DIR [OUT_DIR ...]
    python benchmarks/simulate.py record [--trials 80] [--run-dir benchmarks/out/digits-record]
    python benchmarks/simulate.py speed [--trials 10000] [--workers 256] [--sampler random]
        [--scheduler asha]

``compare`` runs every method at every worker count on every instance with seeds
0..seeds-1 (the seed is the sampler's), each for ``--hours`` of simulated time (the study's
``search.timeout``: no trial starts after it; with ``--budget K``, K times the median time
of one full trial on the instance, so that each worker can run about K full trials) or
``--max-trials`` trials, whichever ends first, and prints the normalised regret at the end
(the best validation accuracy found by then against the instance's reference best, as a
fraction of it): interquartile mean over instances x seeds with a bootstrap 95 % interval,
and the machine's seconds the simulations took. One plot per worker count (any-time regret,
all instances pooled) goes to ``--out``, with ``finals.json`` (each run's regret at the end);
``pool DIR [DIR ...]`` pools the ``finals.json`` of runs made apart (other instances in
another process) into the same tables. ``--tpe-seeds`` runs fewer seeds for the TPE
methods, whose ask grows with the history (at 256 workers each simulation runs hundreds of
trials).

``--benchmark`` picks the surrogate: LCBench (52 epochs), the ``synthetic`` benchmark's
crossing curves (instances ``a,b``, 52 epochs) or the replay of a study that really ran
(``replay:RUN_DIR/NAME``: one instance, its epochs those of the study).

``record`` runs a real study to replay: ``studies/digits-asha.yaml`` (the digits CNN, 12
epochs) with a random sampler (seed 0) and no scheduler, so that every trial's curve is
whole, on the embedded default; then ``compare --benchmark replay:RUN_DIR/digits-record``.

``speed`` times one simulation of ``--trials`` trials of up to 52 epochs (LCBench 3945) and
says where the time goes (cProfile's top functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpsearch.exceptions import HpsearchError
from hpsearch.simulation import simulate
from hpsearch.simulation._grid import Cell, bootstrap, iqm, plot, run_grid
from hpsearch.spec import StudySpec

#: The five LCBench instances the comparison runs by default.
LCBENCH_DEV = "3945,7593,34539,126025,189909"


@functools.cache
def _bench(benchmark: str) -> Any:
    """The surrogate ``--benchmark`` names: ``lcbench``, ``synthetic`` or ``replay:FOLDER``."""
    from hpsearch.data.surrogates import benchmark_of

    if benchmark.startswith("replay:"):
        return benchmark_of("replay", {"name": "replay", "study": benchmark.split(":", 1)[1]})
    return benchmark_of(benchmark, None)


def _objective(benchmark: str, instance: str) -> dict[str, Any]:
    """The ``objective`` of a study of ``benchmark`` on ``instance``."""
    if benchmark.startswith("replay:"):
        folder = benchmark.split(":", 1)[1]
        return {
            "model": "replay",
            "epochs": _bench(benchmark).max_epochs,
            "dataset": {"name": "replay", "study": folder},
        }
    return {"model": benchmark, "epochs": 52, "dataset": {"name": benchmark, "instance": instance}}


def _spec(
    instance: str,
    *,
    hours: float | None,
    n_trials: int,
    sampler: str,
    scheduler: str,
    benchmark: str = "lcbench",
) -> StudySpec:
    search: dict[str, Any] = {
        "n_trials": n_trials,
        "sampler": sampler,
        "scheduler": scheduler,
        "seed": 0,
    }
    if hours is not None:
        search["timeout"] = hours * 3600
    return StudySpec.from_dict(
        {
            "name": f"{benchmark.split(':')[0]}-{Path(instance).name}",
            "objective": _objective(benchmark, instance),
            "search": search,
            "cluster": {"backend": "simulated", "simulated": {"workers": 4}},
        }
    )


def _budget_hours(instance: str, args: argparse.Namespace) -> float:
    """The simulated time each run gets: ``--hours``, or ``--budget`` times the median time of
    one full trial on the instance (so that each worker can run about that many, whatever the
    instance's epoch times)."""
    if args.budget is None:
        return float(args.hours)
    import math
    import random
    import statistics

    bench = _bench(args.benchmark)
    epochs = _objective(args.benchmark, instance)["epochs"]
    rng = random.Random(0)
    space = bench.space()

    def draw(p: dict[str, Any]) -> Any:
        if p["type"] == "categorical":
            return rng.choice(p["choices"])
        low, high = p["low"], p["high"]
        if p.get("log"):
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        else:
            value = rng.uniform(low, high)
        return round(value) if p["type"] == "int" else value

    totals = [
        bench.curve({k: draw(p) for k, p in space.items()}, instance, epochs).total_s
        for _ in range(200)
    ]
    return args.budget * statistics.median(totals) / 3600


def compare(args: argparse.Namespace) -> None:
    instances = args.instances.split(",")
    if args.benchmark.startswith("replay:"):
        instances = list(_bench(args.benchmark).instances)
    elif args.benchmark == "synthetic" and args.instances == LCBENCH_DEV:
        instances = ["a", "b"]
    workers = [int(w) for w in args.workers.split(",")]
    methods = args.methods.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pooled: dict[tuple[int, str], list[Cell]] = {}
    finals: list[dict[str, Any]] = []
    started = time.perf_counter()
    for instance in instances:
        # One spec an instance: run_grid sets each method, worker count and seed on it.
        spec = _spec(
            instance,
            hours=_budget_hours(instance, args),
            n_trials=args.max_trials,
            sampler="random",
            scheduler="none",
            benchmark=args.benchmark,
        )
        for n in workers:
            for method in methods:
                seeds = args.seeds
                if method.startswith("tpe") and args.tpe_seeds:
                    seeds = args.tpe_seeds
                (cell,) = run_grid(spec, methods=[method], workers=[n], seeds=seeds)
                pooled.setdefault((n, method), []).append(cell)
                finals.append(
                    {
                        "instance": instance,
                        "workers": n,
                        "method": method,
                        "regret": list(cell.regret[-1]),
                    }
                )
                print(
                    f"  {instance} {n:>4} workers {method:<14} regret {cell.summary()[0]:.4f} "
                    f"trials {cell.trials:7.0f}  {cell.wall_s:7.1f} s",
                    flush=True,
                )
    print(f"\nall simulations: {time.perf_counter() - started:.0f} s of wall on this machine\n")
    rows = []
    print(
        "| workers | method | regret at the end (IQM) | 95 % interval | "
        "trials per run | seeds x instances | wall s |"
    )
    print("|---:|---|---:|---|---:|---:|---:|")
    for (n, method), cells in sorted(pooled.items()):
        final = [r for c in cells for r in c.regret[-1]]
        low, high = bootstrap(final)
        trials = sum(c.trials for c in cells) / len(cells)
        wall = sum(c.wall_s for c in cells)
        print(
            f"| {n} | {method} | {iqm(final):.4f} | {low:.4f} - {high:.4f} | {trials:.0f} | "
            f"{len(final)} | {wall:.0f} |"
        )
        rows.append(
            {
                "workers": n,
                "method": method,
                "iqm": iqm(final),
                "low": low,
                "high": high,
                "trials": trials,
                "runs": len(final),
                "wall_s": wall,
            }
        )
    (out / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")
    # Each run's regret at the end, to pool runs made apart (other instances, other machines).
    (out / "finals.json").write_text(json.dumps(finals, indent=1) + "\n")
    for n in workers:
        merged = []
        for (m_n, method), cells in pooled.items():
            if m_n != n:
                continue
            merged.append(
                Cell(
                    method,
                    n,
                    cells[0].times,
                    [[r for c in cells for r in c.regret[i]] for i in range(len(cells[0].times))],
                    sum(c.wall_s for c in cells),
                    sum(c.trials for c in cells) / len(cells),
                )
            )
        name = args.benchmark.split(":")[0]
        path = out / f"{name}-{n}-workers.png"
        title = f"{name}, {len(instances)} instance(s)"
        plot(merged, n, title, share=True).savefig(path, dpi=110)
        print(f"plot {path}")


def pool(args: argparse.Namespace) -> None:
    """Per instance and pooled regret IQM (pooled: with a bootstrap 95 % interval) of the
    ``finals.json`` in each folder."""
    cells: dict[tuple[int, str], dict[str, list[float]]] = {}
    for folder in args.folders:
        for row in json.loads((Path(folder) / "finals.json").read_text()):
            by_instance = cells.setdefault((row["workers"], row["method"]), {})
            by_instance.setdefault(row["instance"], []).extend(row["regret"])
    print("| workers | method | instance | regret at the end (IQM) | runs |")
    print("|---:|---|---|---:|---:|")
    for (n, method), by_instance in sorted(cells.items()):
        for instance, values in sorted(by_instance.items()):
            print(f"| {n} | {method} | {instance} | {iqm(values):.4f} | {len(values)} |")
        every = [v for values in by_instance.values() for v in values]
        low, high = bootstrap(every)
        interval = f"({low:.4f} - {high:.4f})"
        print(f"| {n} | {method} | pooled | {iqm(every):.4f} {interval} | {len(every)} |")


def record(args: argparse.Namespace) -> None:
    import shutil
    import subprocess

    import yaml

    root = Path(__file__).resolve().parents[1]
    spec = yaml.safe_load((root / "studies" / "digits-asha.yaml").read_text())
    spec["name"] = "digits-record"
    spec["search"].update(n_trials=args.trials, sampler="random", seed=0, scheduler="none")
    spec["search"].pop("asha", None)
    spec["cluster"] = {"slots": 2, "gpus": "none"}
    run_dir = Path(args.run_dir).resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    path = run_dir / "digits-record.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    started = time.perf_counter()
    command = [sys.executable, "-m", "hpsearch.cli", "run", str(path), "--run-dir", str(run_dir)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    print(
        f"recorded {args.trials} trials in {time.perf_counter() - started:.0f} s: "
        f"--benchmark replay:{run_dir / 'digits-record'}"
    )


def speed(args: argparse.Namespace) -> None:
    spec = _spec(
        "3945", hours=None, n_trials=args.trials, sampler=args.sampler, scheduler=args.scheduler
    )
    data = spec.to_dict()
    data["cluster"]["simulated"] = {"workers": args.workers}
    spec = StudySpec.from_dict(data)
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    sim = simulate(spec, study_dir=Path(args.out) / "speed")
    profile.disable()
    wall = time.perf_counter() - started
    summary = sim.summary()
    print(
        f"{args.trials} trials, {args.workers} workers, {args.sampler} + {args.scheduler}: "
        f"{wall:.1f} s of wall (with the profiler on), {summary['segments']} trial segments, "
        f"{summary['simulated_s'] / 3600:.2f} simulated h, {summary['device_hours']:.0f} "
        f"device-hours, best {sim.study.best_value:.3f}"
    )
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--benchmark", default="lcbench")
    c.add_argument("--instances", default=LCBENCH_DEV)
    c.add_argument("--seeds", type=int, default=20)
    c.add_argument("--tpe-seeds", type=int, default=0)
    c.add_argument("--workers", default="4,32,256")
    c.add_argument("--methods", default="random,tpe,tpe+hyperband,asha,pbt")
    c.add_argument("--hours", type=float, default=0.25)
    c.add_argument("--budget", type=float, default=None)
    c.add_argument("--max-trials", type=int, default=1000)
    c.add_argument("--out", default="benchmarks/out/simulate")
    p = sub.add_parser("pool")
    p.add_argument("folders", nargs="+")
    r = sub.add_parser("record")
    r.add_argument("--trials", type=int, default=80)
    r.add_argument("--run-dir", default="benchmarks/out/digits-record")
    s = sub.add_parser("speed")
    s.add_argument("--trials", type=int, default=10_000)
    s.add_argument("--workers", type=int, default=256)
    s.add_argument("--sampler", default="random")
    s.add_argument("--scheduler", default="asha")
    s.add_argument("--out", default="benchmarks/out/simulate")
    args = parser.parse_args()
    try:
        {"compare": compare, "pool": pool, "record": record, "speed": speed}[args.command](args)
    except (ValueError, HpsearchError) as exc:  # an unknown benchmark, a study that can't replay
        parser.error(str(exc).splitlines()[0])


if __name__ == "__main__":
    main()
