"""Data parallelism on CPU ranks: 1 vs 2 ranks, throughput and per-trial start-up overhead.

Two studies of 10 CNN trials each (digits resized to 28x28, so an epoch is real work), one
with ``gpus_per_trial: 1`` (the trial trains in the warm worker process) and one with
``gpus_per_trial: 2`` (two gloo ranks, warm rank processes reused across trials). Per trial:
samples/s of its steady epochs (epochs 2..E, from MLflow), and its start-up overhead = its
wall time in the study (asked to told; these trials are long enough that the coordinator
does not ask ahead) minus E x its steady epoch time. The first trial of a study also starts
the rank processes (a cold start); later trials reuse them.

    python benchmarks/ddp_cpu.py [--n-trials 10] [--epochs 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine, table

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")


def _spec(name: str, ranks: int, n_trials: int, epochs: int) -> dict:
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": {"name": "digits", "size": 28},
            "epochs": epochs,
            "precision": "fp32",
            "gpus_per_trial": ranks,
            "params": {"batch_size": 64, "channels": 16},
        },
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
        "search": {
            "n_trials": n_trials,
            "sampler": "random",
            "pruner": "none",
            "seed": 0,
            "max_concurrent": 1,
        },
        "cluster": {"slots": 2, "n_workers": 1},
    }


def run(ranks: int, n_trials: int, epochs: int, folder: Path) -> dict:
    from mlflow import MlflowClient

    from hpsearch import Study

    name = f"ddp-{ranks}"
    result = Study(_spec(name, ranks, n_trials, epochs), run_dir=folder).run()
    study = result.best and optuna.load_study(
        study_name=name,
        storage=Study(_spec(name, ranks, n_trials, epochs), run_dir=folder).optuna_study()._storage,
    )
    client = MlflowClient(tracking_uri=result.mlflow_uri)
    exp = client.get_experiment_by_name(name)
    runs = {
        int(r.data.tags["hpsearch.trial_number"]): r
        for r in client.search_runs([exp.experiment_id])
        if "hpsearch.trial_number" in r.data.tags
    }
    rates, overheads = [], []
    for t in sorted(study.trials, key=lambda t: t.number):
        rid = runs[t.number].info.run_id
        epoch_s = [
            m.value for m in sorted(client.get_metric_history(rid, "epoch_s"), key=lambda m: m.step)
        ]
        sps = [
            m.value
            for m in sorted(client.get_metric_history(rid, "samples_per_s"), key=lambda m: m.step)
        ]
        steady = statistics.median(epoch_s[1:])
        wall = (t.datetime_complete - t.datetime_start).total_seconds()  # asked -> told
        rates.append(statistics.median(sps[1:]))
        overheads.append(wall - epochs * steady)
    return {
        "rate": statistics.median(rates),
        "first": overheads[0],
        "later": statistics.median(overheads[1:]),
        "wall": result.progress.elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trials", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-ddp-"))
    rows = []
    res = {}
    for ranks in (1, 2):
        res[ranks] = r = run(ranks, args.n_trials, args.epochs, folder)
        rows.append(
            (
                f"{ranks} rank{'s' if ranks > 1 else ''}",
                f"{r['rate']:.0f}",
                f"{r['rate'] / res[1]['rate']:.2f}",
                f"{r['first']:.2f}",
                f"{r['later']:.2f}",
                f"{r['wall']:.1f}",
            )
        )
        print(f"done: {ranks} rank(s)", file=sys.stderr)
    print(
        f"\nCNN (16/32 channels) on digits 28x28, global batch 64, {args.epochs} epochs, "
        f"{args.n_trials} trials one at a time, 2 CPU slots — {machine()}\n"
    )
    print(
        table(
            [
                "trial",
                "samples/s (steady)",
                "vs 1 rank",
                "start-up s, first trial",
                "start-up s, later trials (median)",
                "study wall s",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
