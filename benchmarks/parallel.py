"""Layouts side by side: ddp, fsdp and pipeline (GPipe, 1F1B) on 1 to N devices, one model.

Every row is a real hpsearch study of one trial of the built-in ``transformer`` (the family
that both fsdp and the pipeline can train), all on one local cluster: a leasing worker that
owns every device (the GPUs when CUDA has some, else one CPU slot per core, one torch thread
each), so that a 1-device trial gets one device's share and the rank processes stay warm from
study to study. Every trial runs in rank processes (a ``trial_timeout`` is set, which moves
even a 1-device trial out of the worker process), so the peak memory of every row is that
of a rank process. The numbers are read back from each trial's MLflow run
(``mlflow.search_runs`` and the metric history): samples/s is the median over epochs 2..E
(epoch 1 pays the warm-up), memory is per rank: ``param_bytes_rank<r>`` (the parameters
the rank holds), ``train_state_bytes_rank<r>`` (parameters + gradients + Adam's moments,
after the first step) and the peak (``peak_rss_bytes_rank<r>``: the rank process's peak
resident set, Python and torch included, on CPU; ``cuda_max_allocated_bytes_rank<r>`` on
CUDA).

Then a small study with the layout itself searched (a grid over ``parallel.strategy`` x
``lr`` on the largest set): which layout won by the metric, and every trial's throughput
from MLflow (``Study.trials_dataframe``).

    python benchmarks/parallel.py [--devices 1,2] [--epochs 3] [--width 192] [--depth 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine, table

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")

SIZES = (1, 2, 4, 8)


def layouts(k: int, microbatches: int) -> list[tuple[str, dict]]:
    """The rows of a set of ``k`` devices: on one device every layout is the same model on
    the same device, so it gets one row."""
    if k == 1:
        return [("1 device (any layout)", {"strategy": "ddp"})]
    pipe = {"strategy": "pipeline", "stages": k, "microbatches": max(microbatches, k)}
    return [
        ("ddp", {"strategy": "ddp"}),
        ("fsdp", {"strategy": "fsdp"}),
        (f"pipeline {k} stages, gpipe", {**pipe, "schedule": "gpipe"}),
        (f"pipeline {k} stages, 1f1b", {**pipe, "schedule": "1f1b"}),
    ]


def spec(name: str, k: int, args: argparse.Namespace, **changes: object) -> dict:
    objective = {
        "model": "transformer",
        "dataset": {"name": "python-docs", "max_chars": args.max_chars},
        "metric": "val_perplexity",
        "epochs": args.epochs,
        "precision": args.precision,
        "gpus_per_trial": k,
        "parallel": {"strategy": "ddp"},
        "trial_timeout": 3600,  # a rank process for every trial, also of one device
        "checkpoint_interval": None,
        "params": {
            "width": args.width,
            "depth": args.depth,
            "heads": args.heads,
            "dropout": 0.0,
            "seq_len": 64,
            "batch_size": args.batch_size,
        },
    }
    objective.update(changes.pop("objective", {}))  # type: ignore[arg-type]
    out = {
        "name": name,
        "objective": objective,
        "space": {"lr": {"type": "categorical", "choices": [2e-3]}},
        "search": {
            "n_trials": 1,
            "sampler": "random",
            "pruner": "none",
            "seed": 0,
            "max_concurrent": 1,
        },
    }
    out.update(changes)
    return out


def trial_runs(result):  # type: ignore[no-untyped-def]
    """The study's trial runs (a pandas frame, one row per run) and a client for histories."""
    import mlflow

    mlflow.set_tracking_uri(result.mlflow_uri)
    frame = mlflow.search_runs(
        experiment_names=[result.experiment],
        filter_string=f"tags.`hpsearch.study` = '{result.study_name}'",
    )
    if len(frame):
        frame = frame[frame["tags.hpsearch.trial_number"].notna()]
    return frame, mlflow.MlflowClient(tracking_uri=result.mlflow_uri)


def steady_rate(client, run_id: str) -> float:  # type: ignore[no-untyped-def]
    history = sorted(client.get_metric_history(run_id, "samples_per_s"), key=lambda m: m.step)
    values = [m.value for m in history]
    return statistics.median(values[1:] or values)


def per_rank(run, key: str, k: int) -> list[float]:  # type: ignore[no-untyped-def]
    return [float(run.get(f"metrics.{key}_rank{r}", float("nan"))) for r in range(k)]


def mib(values: list[float]) -> str:
    return " / ".join(f"{v / 2**20:.1f}" for v in values)


def measure(k: int, label: str, parallel: dict, args, client, folder: Path) -> dict:  # type: ignore[no-untyped-def]
    from hpsearch import Study

    name = f"layout-{k}-{label.split()[0]}-{parallel.get('schedule', '')}".rstrip("-")
    start = time.perf_counter()
    result = Study(
        spec(name, k, args, objective={"parallel": parallel}), run_dir=folder, client=client
    ).run(progress=False)
    wall = time.perf_counter() - start
    frame, mlflow_client = trial_runs(result)
    if result.best is None or len(frame) != 1:
        (trial,) = Study(spec(name, k, args), run_dir=folder).optuna_study().trials
        reason = trial.user_attrs.get("hpsearch.fail_reason", trial.user_attrs)
        raise RuntimeError(f"{name}: the trial ended {trial.state.name}: {reason}")
    run = frame.iloc[0]
    peak_key = "cuda_max_allocated_bytes" if args.cuda else "peak_rss_bytes"
    return {
        "k": k,
        "label": label,
        "rate": steady_rate(mlflow_client, run["run_id"]),
        "params": per_rank(run, "param_bytes", k),
        "state": per_rank(run, "train_state_bytes", k),
        "peak": per_rank(run, peak_key, k),
        "tag": run.get("tags.hpsearch.parallel"),
        "wall": wall,
    }


def search(k: int, args, client, folder: Path) -> tuple[str, list[tuple]]:  # type: ignore[no-untyped-def]
    """A grid over the layout (and two learning rates) on a set of ``k`` devices; prints the
    layout table first (``report``), so that it is not lost if the search fails."""
    from hpsearch import Study

    name = "layout-search"
    choices = ["ddp", "fsdp", "pipeline"]
    study = Study(
        spec(
            name,
            k,
            args,
            objective={
                "epochs": args.search_epochs,
                "parallel": {"stages": k, "microbatches": max(args.microbatches, k)},
            },
            space={
                "parallel.strategy": {"type": "categorical", "choices": choices},
                "lr": {"type": "categorical", "choices": [1e-3, 3e-3]},
            },
            # 5 of the 6 grid points, so every layout runs at least once: after the last
            # point, Optuna's grid sampler calls study.stop(), which raises outside optimize()
            # (the coordinator asks and tells; fixed on main since, where 6 would do).
            search={"n_trials": 5, "sampler": "grid", "pruner": "none", "seed": 0},
        ),
        run_dir=folder,
        client=client,
    )
    result = study.run(progress=False)
    frame = study.trials_dataframe()
    _, mlflow_client = trial_runs(result)
    peak = "cuda_max_allocated_bytes_per_rank" if args.cuda else "peak_rss_bytes_per_rank"
    rows = []
    for _, t in frame.sort_values("number").iterrows():
        done = t["state"] == "COMPLETE"
        rows.append(
            (
                t["number"],
                t["params_parallel.strategy"],
                f"{t['params_lr']:g}",
                t["state"],
                f"{t['value']:.3f}" if done else "-",
                f"{steady_rate(mlflow_client, t['run_id']):.0f}" if done else "-",
                f"{t['train_state_bytes_per_rank'] / 2**20:.1f}" if done else "-",
                f"{t[peak] / 2**20:.0f}" if done else "-",
            )
        )
    best = result.best
    won = (
        f"best trial #{best.number}: {best.params['parallel.strategy']} "
        f"(lr {best.params['lr']:g}), val_perplexity {best.value:.3f}"
        if best is not None
        else "no trial completed"
    )
    return won, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--devices",
        default=None,
        help="set sizes, e.g. 1,2 (default: 1, 2, 4, 8 up to the GPUs, else the CPU cores)",
    )
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each layout's trial")
    parser.add_argument("--search-epochs", type=int, default=2, help="epochs of a search trial")
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--depth", type=int, default=None, help="default: max(4, 2*N - 2)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32, help="the global batch")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--max-chars", type=int, default=30000, help="of the corpus")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--no-search", action="store_true", help="leave out the search study")
    args = parser.parse_args()

    import torch
    from distributed import Client

    from hpsearch.cluster import discover_gpus, start_local_cluster

    args.cuda = torch.cuda.is_available()
    gpus = [g.index for g in discover_gpus()] if args.cuda else []
    n = len(gpus) if args.cuda else (os.cpu_count() or 1)
    sizes = (
        [int(x) for x in args.devices.split(",")]
        if args.devices
        else [k for k in SIZES if k <= n] or [1]
    )
    if max(sizes) > n:
        sys.exit(f"--devices {args.devices}: this machine has {n} {'GPUs' if gpus else 'cores'}")
    args.depth = args.depth or max(4, 2 * max(sizes) - 2)  # a stage per device of the largest set
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-parallel-"))
    cluster = start_local_cluster(
        gpus=gpus or None, gpus_per_trial=max(sizes), mixed_sizes=True, n_slots=None if gpus else n
    )
    client = Client(cluster)
    start = time.perf_counter()
    results = []
    try:
        for k in sizes:
            for label, parallel in layouts(k, args.microbatches):
                results.append(measure(k, label, parallel, args, client, folder))
                print(f"done: {k} device(s), {label}", file=sys.stderr)
        base = results[0]["rate"]
        rows = [
            (
                r["k"],
                r["label"],
                f"{r['rate']:.0f}",
                f"{r['rate'] / base:.2f}",
                mib(r["params"]),
                mib(r["state"]),
                mib(r["peak"]),
            )
            for r in results
        ]
        kind = "GPU" if args.cuda else "CPU slot"
        peak = "peak CUDA allocated MiB/rank" if args.cuda else "peak RSS MiB/rank"
        print(
            f"\ntransformer width {args.width}, depth {args.depth}, {args.heads} heads, "
            f"seq_len 64, global batch {args.batch_size}, python-docs {args.max_chars} chars, "
            f"{args.precision}, "
            f"{args.epochs} epochs (samples/s: median of epochs 2..{args.epochs}); "
            f"devices are {kind}s — {machine()}, torch {torch.__version__}\n"
        )
        print(
            table(
                [
                    "devices",
                    "layout",
                    "samples/s",
                    "vs 1 device",
                    "params MiB/rank",
                    "params+grads+Adam MiB/rank",
                    peak,
                ],
                rows,
            )
        )
        sys.stdout.flush()
        search_result = (
            search(max(sizes), args, client, folder)
            if not args.no_search and max(sizes) > 1
            else None
        )
    finally:
        client.close()
        cluster.close(timeout=20)
    total = time.perf_counter() - start

    if search_result is not None:
        won, search_rows = search_result
        print(
            f"\nlayout searched: grid over parallel.strategy x lr on {max(sizes)} devices, "
            f"{args.search_epochs} epochs (pipeline: {max(sizes)} stages, 1f1b) — {won}\n"
        )
        print(
            table(
                [
                    "trial",
                    "parallel.strategy",
                    "lr",
                    "state",
                    "val_perplexity",
                    "samples/s",
                    "params+grads+Adam MiB/rank (max)",
                    "peak MiB/rank (max)",
                ],
                search_rows,
            )
        )
    print(f"\ntotal wall {total:.0f} s")


if __name__ == "__main__":
    main()
