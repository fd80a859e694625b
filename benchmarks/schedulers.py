"""Schedulers side by side: the same study, the same slots, the same trial budget.

Each workload runs once per way of spending the budget, one after another on one local
cluster of 2 worker processes (CPU slots), every study from a fresh folder with the same
sampler and seed (after an untimed warm-up study, so that no row pays the workers'
imports):

- ``none``: every trial runs all its epochs (no pruning);
- ``hyperband``: Optuna's Hyperband pruner (a trial is stopped, never resumed);
- ``asha``: hpsearch's asynchronous successive halving by promotion (trials pause at rungs
  with their checkpoint and are resumed when promoted);
- ``asha-auto``: the same with ``brackets: auto`` (the default): it measures on the study's
  unpaused trials whether early rungs predict the last epoch and starts trials accordingly;
- ``pbt``: hpsearch's population-based training (weak trials continue from a strong one's
  checkpoint with perturbed hyperparameters);
- Ray Tune's ASHA is listed and not run: Ray is not a dependency of hpsearch and no Ray Tune
  trainable of these models is written (the row says so).

The workloads: the digits CNN, whose early epochs rank trials well, and the digits GAN,
whose early MMD does not. For each: wall time of the study, epochs trained (summed over
trials; a continuation counts only its own epochs), trials, and the best value, with the
wall and the best value relative to ``none``.

    python benchmarks/schedulers.py [--workloads cnn gan] [--n-trials 18] [--epochs 12]

With ``--seeds N`` every way runs with the sampler seeds ``0..N-1`` and each is compared with
no pruning on the same seed; the medians over the seeds follow the per-seed rows (with 18
trials, one lucky or unlucky configuration decides a single row).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine, table

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")
SLOTS = 2
STUDIES = Path(__file__).resolve().parent.parent / "studies"

#: The study file of each workload, and what to change in it for the benchmark.
WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "cnn": ("digits-cnn.yaml", {"objective.precision": "fp32"}),
    "gan": ("digits-gan.yaml", {"objective.precision": "fp32"}),
}

#: How each row spends the budget (overrides of the study's search section).
WAYS: dict[str, dict[str, Any]] = {
    "none": {"search.pruner": "none", "search.scheduler": "none"},
    "hyperband": {"search.pruner": "hyperband", "search.scheduler": "none"},
    "asha": {
        "search.pruner": "none",
        "search.scheduler": "asha",
        "search.asha": {"min_epochs": 1, "reduction_factor": 3, "brackets": 1},
    },
    # The default: asha measures whether early rungs predict the last epoch (brackets: auto).
    "asha-auto": {
        "search.pruner": "none",
        "search.scheduler": "asha",
        "search.asha": {"min_epochs": 1, "reduction_factor": 3, "brackets": "auto"},
    },
    "pbt": {"search.pruner": "none", "search.scheduler": "pbt"},
}


def _spec(workload: str, way: str, n_trials: int, epochs: int, seed: int = 0) -> Any:
    from hpsearch.spec import StudySpec

    file, changes = WORKLOADS[workload]
    overrides = {
        **changes,
        **WAYS[way],
        "name": f"bench-{workload}-{way}",
        "search.n_trials": n_trials,
        "search.sampler": "tpe",
        "search.seed": seed,
        "objective.epochs": epochs,
        "objective.checkpoint_interval": 0,
    }
    if way == "pbt":
        # A population of a third of the budget, exploiting every quarter of the epochs:
        # the rest of the budget goes to continuations.
        overrides["search.pbt"] = {
            "population": max(2, n_trials // 3),
            "interval_epochs": max(1, epochs // 4),
            "quantile": 0.25,
            "perturb": [0.8, 1.2],
            "resample_probability": 0.25,
        }
    return StudySpec.from_yaml(STUDIES / file, overrides=overrides)


def _epochs_trained(trials: list[optuna.trial.FrozenTrial]) -> int:
    """Epochs each trial trained itself (a continuation starts at its ``from_epoch``)."""
    total = 0
    for t in trials:
        start = int(t.user_attrs.get("from_epoch", 0) or 0)
        total += sum(1 for step in t.intermediate_values if step > start)
    return total


def run(
    workload: str, way: str, n_trials: int, epochs: int, folder: Path, client: Any, seed: int = 0
) -> dict:
    from hpsearch import Study
    from hpsearch.exceptions import SpecError

    try:
        spec = _spec(workload, way, n_trials, epochs, seed)
    except SpecError as exc:  # a scheduler this version does not have
        return {"skipped": str(exc).splitlines()[0]}
    study = Study(spec, run_dir=folder / f"seed-{seed}", client=client)
    start = time.perf_counter()
    result = study.run(progress=False)
    wall = time.perf_counter() - start
    trials = study.optuna_study().get_trials(deepcopy=False)
    return {
        "wall": wall,
        "epochs": _epochs_trained(trials),
        "trials": len(trials),
        "complete": sum(t.state.name == "COMPLETE" for t in trials),
        "running": sum(t.state.name == "RUNNING" for t in trials),
        "best": result.best.value if result.best is not None else None,
    }


@contextlib.contextmanager
def _cluster() -> Iterator[tuple[Any, Path]]:
    """One local cluster of :data:`SLOTS` worker processes for every row, and a fresh folder
    for the studies."""
    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    folder = Path(tempfile.mkdtemp(prefix="hpsearch-schedulers-"))
    cluster = start_local_cluster(n_workers=SLOTS, gpus_per_trial=1)
    client = Client(cluster)
    try:
        client.wait_for_workers(SLOTS)
        yield client, folder
    finally:
        client.close()
        cluster.close(timeout=20)


def _ray_row() -> dict:
    """Ray Tune is not a dependency of hpsearch, and no Ray Tune trainable of these models is
    written here: the row says so rather than leaving Ray out silently."""
    return {"skipped": "not run: Ray Tune is not a dependency, and no Ray trainable is written"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["cnn", "gan"], choices=WORKLOADS)
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--n-trials", type=int, default=18, help="trials per study")
    parser.add_argument("--epochs", type=int, default=12, help="epochs of a trial run to its end")
    parser.add_argument(
        "--seeds", type=int, default=1, help="sampler seeds 0..N-1, each way on each (paired)"
    )
    args = parser.parse_args()
    if args.seeds > 1:
        _seeds(args)
        return

    results: dict[tuple[str, str], dict] = {}
    with _cluster() as (client, folder):
        for workload in args.workloads:
            # Untimed: the workers import torch and load the data set once, for every row.
            run(workload, "none", 2, 1, folder / "warm-up", client)
            for way in args.ways:
                results[workload, way] = run(
                    workload, way, args.n_trials, args.epochs, folder, client
                )
                print(f"{workload} {way}: {results[workload, way]}", flush=True)
            results[workload, "ray tune asha"] = _ray_row()

    for workload in args.workloads:
        file, _ = WORKLOADS[workload]
        base = results.get((workload, "none"), {})
        rows = []
        for (w, way), r in results.items():
            if w != workload:
                continue
            if "skipped" in r:
                rows.append((way, "-", "-", "-", "-", "-", "-", r["skipped"]))
                continue
            rel_wall = r["wall"] / base["wall"] if base.get("wall") else None
            rel_best = (
                (r["best"] - base["best"]) / abs(base["best"])
                if r["best"] is not None and base.get("best")
                else None
            )
            rows.append(
                (
                    way,
                    f"{r['wall']:.1f}",
                    "-" if rel_wall is None else f"{rel_wall:.2f}",
                    r["epochs"],
                    f"{r['trials']} ({r['complete']} complete, {r['running']} running)",
                    "-" if r["best"] is None else f"{r['best']:.4f}",
                    "-" if rel_best is None else f"{100 * rel_best:+.1f}%",
                    "",
                )
            )
        print(
            f"\n{file}: {args.n_trials} trials x up to {args.epochs} epochs, "
            f"{SLOTS} CPU slots ({machine()})"
        )
        print(
            table(
                [
                    "way",
                    "wall s",
                    "wall / none",
                    "epochs trained",
                    "trials",
                    "best",
                    "best vs none",
                    "note",
                ],
                rows,
            )
        )


def _seeds(args: argparse.Namespace) -> None:
    """Every way on every seed, one after another on one cluster; per seed, the wall and the
    best relative to no pruning on the same seed; then their medians over the seeds."""
    rows: list[tuple[Any, ...]] = []
    summary: list[tuple[Any, ...]] = []
    with _cluster() as (client, folder):
        for workload in args.workloads:
            run(workload, "none", 2, 1, folder / "warm-up", client)
            pairs: dict[str, list[tuple[float, float | None]]] = {}
            for seed in range(args.seeds):
                base = run(workload, "none", args.n_trials, args.epochs, folder, client, seed)
                for way in args.ways:
                    r = base
                    if way != "none":
                        r = run(workload, way, args.n_trials, args.epochs, folder, client, seed)
                    wall = r["wall"] / base["wall"]
                    best = None  # no trial completed (a study can end with every trial pruned)
                    if r["best"] is not None and base["best"] is not None:
                        best = (r["best"] - base["best"]) / abs(base["best"])
                    pairs.setdefault(way, []).append((wall, best))
                    rows.append(
                        (
                            workload,
                            seed,
                            way,
                            f"{r['wall']:.1f}",
                            f"{wall:.2f}",
                            r["epochs"],
                            "no trial complete" if r["best"] is None else f"{r['best']:.4f}",
                            "-" if best is None else f"{100 * best:+.1f}%",
                        )
                    )
                    print(rows[-1], flush=True)
            summary += [(workload, way, *_medians(p)) for way, p in pairs.items()]
    print(
        f"\n{args.n_trials} trials x up to {args.epochs} epochs, {SLOTS} CPU slots, "
        f"seeds 0-{args.seeds - 1} ({machine()})"
    )
    heads = [
        "workload",
        "seed",
        "way",
        "wall s",
        "wall / none",
        "epochs trained",
        "best",
        "best vs none",
    ]
    print(table(heads, rows) + "\n")
    print(
        table(
            [
                "workload",
                "way",
                "wall / none (median)",
                "range",
                "best vs none (median)",
                "range",
                "no trial complete",
            ],
            summary,
        )
    )


def _medians(pairs: list[tuple[float, float | None]]) -> tuple[str, ...]:
    """The median wall ratio and best gap over the seeds, their ranges, and how many seeds
    ended with no trial complete."""
    import statistics

    walls = [w for w, _ in pairs]
    bests = [b for _, b in pairs if b is not None]
    gap = (
        (
            f"{100 * statistics.median(bests):+.1f}%",
            f"{100 * min(bests):+.1f}% to {100 * max(bests):+.1f}%",
        )
        if bests
        else ("-", "-")
    )
    return (
        f"{statistics.median(walls):.2f}",
        f"{min(walls):.2f}-{max(walls):.2f}",
        *gap,
        f"{len(pairs) - len(bests)} of {len(pairs)}",
    )


if __name__ == "__main__":
    main()
