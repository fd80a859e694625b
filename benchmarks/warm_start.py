"""Warm start, measured: a study started from an earlier one against the same study started
cold, on LCBench in simulated time.

    python benchmarks/warm_start.py [--seeds 20] [--trials 50] [--workers 4]
        [--pairs 3945:7593,34539:126025,126026:126029,167104:167149,189865:189866]
        [--narrowed 3945] [--rerun 3945,7593,126025,126029,167149,189866] [--no-history]

For each pair SOURCE:TARGET and each seed, three simulated studies of ``--trials`` TPE trials
(52 epochs, no pruning) on ``--workers`` workers: the source on its instance; the target
cold; the target warm (``search.warm_start: {from: source, top_k: 5, history: true}``).
``--narrowed`` adds the same instance run again with a narrowed space (learning rate and
weight decay in the upper halves of their log ranges, at most 3 layers) started from a run
on the full space. ``--rerun`` adds the same instance and space started from a study of
another seed: the closest relation a source can have, so the speed-up a warm start reaches
when the source's good configurations are the target's.

The measure is the simulated time each target study takes to reach the cold study's final
best: the cold study's own time to its best, against the warm one's (a warm study that never
reaches it counts as its whole run, so its speed-up is an upper bound). Speed-up is cold
over warm; the table gives its median over the seeds, per case and over all the pairs (and
over all the reruns), and the share of seeds where warm was slower.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpsearch import Study
from hpsearch.simulation import TIMELINE


def _spec(name: str, instance: str, seed: int, trials: int, workers: int, **search: Any) -> dict:
    return {
        "name": name,
        "objective": {
            "model": "lcbench",
            "epochs": 52,
            "dataset": {"name": "lcbench", "instance": instance},
        },
        "search": {"n_trials": trials, "sampler": "tpe", "pruner": "none", "seed": seed, **search},
        "cluster": {"backend": "simulated", "simulated": {"workers": workers}},
    }


def _best_times(run_dir: Path, name: str) -> list[tuple[float, float]]:
    """(simulated end, value) of each complete trial, in end order."""
    import json

    ends: dict[int, float] = {}
    values: dict[int, float] = {}
    for line in (run_dir / name / TIMELINE).read_text().splitlines():
        row = json.loads(line)
        if row.get("state") == "COMPLETE":
            ends[row["trial"]] = row["end"]
        if row.get("ended") == "COMPLETE":
            values[row["trial"]] = row["value"]
    return sorted((ends[n], values[n]) for n in values if n in ends)


def _time_to(points: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in points if v >= target), None)


def _narrowed(space: dict[str, Any]) -> dict[str, Any]:
    import math

    out = dict(space)
    for name in ("learning_rate", "weight_decay"):
        low, high = space[name]["low"], space[name]["high"]
        middle = math.exp((math.log(low) + math.log(high)) / 2) if low > 0 else (low + high) / 2
        out[name] = {**space[name], "low": middle}
    out["num_layers"] = {**space["num_layers"], "high": min(3, space["num_layers"]["high"])}
    return out


def one(case: str, seed: int, args: argparse.Namespace) -> tuple[float, bool]:
    """The speed-up of the warm target over the cold one, and whether warm reached the cold
    study's best at all. ``case`` is ``SOURCE:TARGET`` (another instance, or the same one
    with a narrowed space) or ``INSTANCE=`` (the same instance and space, another seed)."""
    from hpsearch.simulation import benchmark

    rerun = case.endswith("=")
    source, _, target = case.rstrip("=").partition(":")
    target = target or source
    narrowed = source == target and not rerun
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        common = {"seed": seed, "trials": args.trials, "workers": args.workers}
        earlier = {**common, "seed": seed + 1000} if rerun else common
        Study(_spec("source", source, **earlier), run_dir=run_dir).run(progress=False)
        cold, warm = (
            _spec("cold", target, **common),
            _spec(
                "warm",
                target,
                **common,
                warm_start={"from": "source", "top_k": args.top_k, "history": args.history},
            ),
        )
        if narrowed:
            space = _narrowed(benchmark("lcbench").space())
            cold["space"] = warm["space"] = space
        for spec in (cold, warm):
            Study(spec, run_dir=run_dir).run(progress=False)
        cold_points, warm_points = _best_times(run_dir, "cold"), _best_times(run_dir, "warm")
        best = max(v for _, v in cold_points)
        t_cold = _time_to(cold_points, best)
        t_warm = _time_to(warm_points, best)
        assert t_cold is not None
        reached = t_warm is not None
        if t_warm is None:
            t_warm = max(t for t, _ in warm_points)
        return t_cold / max(t_warm, 1e-9), reached


def _label(case: str) -> str:
    if case.endswith("="):
        return f"{case[:-1]} -> {case[:-1]} (rerun, another seed)"
    source, _, target = case.partition(":")
    return f"{source} -> {target}" + (" (narrowed space)" if source == target else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--pairs", default="3945:7593,34539:126025,126026:126029,167104:167149,189865:189866"
    )
    parser.add_argument("--narrowed", default="3945")
    parser.add_argument("--rerun", default="3945,7593,126025,126029,167149,189866")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument(
        "--no-history",
        dest="history",
        action="store_false",
        help="top_k alone: what a plain Optuna script does by hand (enqueue_trial of the best)",
    )
    args = parser.parse_args()
    import logging

    logging.getLogger("hpsearch").setLevel(logging.ERROR)  # the table alone, not each study's lines
    pairs = args.pairs.split(",") + [f"{i}:{i}" for i in args.narrowed.split(",") if i]
    reruns = [f"{i}=" for i in args.rerun.split(",") if i]
    started = time.perf_counter()
    print("| source -> target | median speed-up (cold / warm) | warm slower | never reached |")
    print("|---|---:|---:|---:|")
    for group, label in ((pairs, "all"), (reruns, "all reruns")):
        everything: list[float] = []
        for case in group:
            results = [one(case, seed, args) for seed in range(args.seeds)]
            speedups = [s for s, _ in results]
            everything += speedups
            print(
                f"| {_label(case)} | {statistics.median(speedups):.2f}x | "
                f"{sum(s < 1 for s in speedups)} of {len(speedups)} | "
                f"{sum(not r for _, r in results)} |",
                flush=True,
            )
        if everything:
            print(
                f"| {label} | {statistics.median(everything):.2f}x | "
                f"{sum(s < 1 for s in everything)} of {len(everything)} | |"
            )
    print(f"\n{time.perf_counter() - started:.0f} s of wall on this machine")


if __name__ == "__main__":
    main()
