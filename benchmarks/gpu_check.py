"""The GPU check: one prepared script for a CUDA machine (under 8 minutes), one table.

1. samples/s of the CNN at fp32 / bf16 / fp16 on one GPU (hpsearch's trainer, autocast and
   grad scaler as a trial uses them);
2. a 1-GPU trial against an all-GPU data-parallel trial (NCCL ranks): scaling efficiency;
3. concurrent trials on disjoint GPU sets: each trial's devices, and the GPUs' mean
   utilisation over the study (sampled with NVML or nvidia-smi);
4. a trial's own speed: samples/s of one trial through ``Study.run`` against the same
   trainer on the same device in this process, on data tiled until an epoch takes at least
   ``--min-epoch-seconds`` (per-epoch work then does not dominate): the worker's environment
   must not slow training (``benchmarks/worker_env.py`` is the CPU side);
5. the layouts side by side on one transformer (``benchmarks/parallel.py``'s rows, on NCCL
   ranks): ddp, fsdp and pipeline (gpipe, 1f1b) on 1, 2, 4 and 8 GPUs (as many as there
   are), samples/s and per-rank parameter, train-state and peak CUDA-allocated memory; rows
   that would not start within ``--layout-seconds`` are listed as skipped, so the check
   keeps its time cap;
6. several trials packed on one GPU (``gpus_per_trial`` 1, 1/2, 1/4, 1/8): trials per
   device-hour, the GPU's utilisation, and a trial's samples/s (``_gpu_packing.py``).

    python benchmarks/gpu_check.py [--epochs 3] [--size 64] [--layout-seconds 150]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import Utilisation, table
from _gpu_packing import packing_rows

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")


def precision_rows(epochs: int, size: int) -> list[tuple]:
    import torch

    from hpsearch.data import load_dataset
    from hpsearch.models import get_family
    from hpsearch.training._trainers import make_trainer

    data = load_dataset({"name": "digits", "size": size}, seed=0)
    device = torch.device("cuda:0")
    rows = []
    for precision in ("fp32", "bf16", "fp16"):
        torch.manual_seed(0)
        params = {"channels": 64, "n_blocks": 3, "dense_units": 256, "batch_size": 256, "lr": 1e-3}
        family = get_family("cnn")
        trainer = make_trainer(
            family,
            family.build(params, data),
            params,
            data,
            device=device,
            precision=precision,
            seed=0,
        )
        trainer.train_epoch(data, 0)  # warm-up: cuDNN autotuning, allocations
        torch.cuda.synchronize()
        start = time.perf_counter()
        n = 0.0
        for epoch in range(1, epochs + 1):
            n += trainer.train_epoch(data, epoch)["samples"]
        torch.cuda.synchronize()
        rate = n / (time.perf_counter() - start)
        acc = trainer.evaluate(data)["val_accuracy"]
        rows.append(
            (
                f"1 GPU, {precision}",
                f"{rate:.0f} samples/s",
                f"val_accuracy {acc:.3f}, skipped fp16 steps {trainer.skipped_steps}",
            )
        )
    return rows


def _spec(name: str, gpus_per_trial: int, n_trials: int, epochs: int, size: int) -> dict:
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": {"name": "digits", "size": size},
            "epochs": epochs,
            "precision": "auto",
            "gpus_per_trial": gpus_per_trial,
            "params": {"batch_size": 256, "channels": 64, "n_blocks": 3},
        },
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
        "search": {"n_trials": n_trials, "sampler": "random", "pruner": "none", "seed": 0},
    }


def _runs(result, name):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=result.mlflow_uri)
    exp = client.get_experiment_by_name(name)
    return client, [
        r for r in client.search_runs([exp.experiment_id]) if "hpsearch.trial_number" in r.data.tags
    ]


def scaling_rows(n_gpus: int, epochs: int, size: int, folder: Path) -> list[tuple]:
    import statistics

    from hpsearch import Study

    rates = {}
    for k in sorted({1, n_gpus}):
        name = f"scale-{k}"
        result = Study(_spec(name, k, 1, epochs + 1, size), run_dir=folder).run()
        client, runs = _runs(result, name)
        history = client.get_metric_history(runs[0].info.run_id, "samples_per_s")
        rates[k] = statistics.median(m.value for m in history[1:])
    rows = [
        (
            f"{k} GPU trial" + (" (NCCL DDP)" if k > 1 else ""),
            f"{r:.0f} samples/s",
            f"precision {runs[0].data.tags.get('hpsearch.precision')}",
        )
        for k, r in rates.items()
    ]
    if n_gpus > 1:
        eff = rates[n_gpus] / (n_gpus * rates[1])
        rows.append((f"scaling efficiency 1 -> {n_gpus} GPUs", f"{eff:.2f}", "ideal 1.00"))
    return rows


def trial_vs_bare_rows(
    epochs: int, folder: Path, *, device: str = "cuda:0", min_epoch_s: float = 2.0
) -> list[tuple]:
    """One trial through ``Study.run`` against the bare trainer, on one device, same data."""
    import statistics

    import numpy as np
    import torch

    from hpsearch import Study
    from hpsearch.data import load_dataset
    from hpsearch.models import get_family
    from hpsearch.training._amp import resolve_precision
    from hpsearch.training._trainers import make_trainer

    params = {"channels": 64, "n_blocks": 3, "dense_units": 256, "batch_size": 256, "lr": 1e-3}
    precision = resolve_precision("auto", torch.device(device))

    def bare(data) -> tuple[float, float]:
        torch.manual_seed(0)
        family = get_family("cnn")
        model = family.build(params, data)
        trainer = make_trainer(
            family, model, params, data, device=torch.device(device), precision=precision, seed=0
        )
        trainer.train_epoch(data, 0)  # warm-up: cuDNN autotuning, allocations
        rates, seconds = [], []
        for epoch in range(1, epochs + 1):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            n = trainer.train_epoch(data, epoch)["samples"]
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            rates.append(n / seconds[-1])
        return statistics.median(rates), statistics.median(seconds)

    base = load_dataset({"name": "digits", "size": 32}, seed=0)
    rate, _ = bare(base)
    x, y = base.x_train.numpy(), base.y_train.numpy()
    tiles = max(1, min(200, int(np.ceil(min_epoch_s * 1.25 * rate / len(x)))))
    noise = np.random.default_rng(0).normal(0.0, 0.05, (tiles, *x.shape)).astype(np.float32)
    path = folder / "tiled-digits.npz"
    np.savez(
        path,
        x=(x[None] + noise).reshape(-1, *x.shape[1:]),
        y=np.tile(y, tiles),
        x_val=base.x_val.numpy(),
        y_val=base.y_val.numpy(),
    )
    bare_rate, epoch_s = bare(load_dataset({"path": str(path)}, seed=0))
    spec = {
        "name": "trial-vs-bare",
        "objective": {
            "model": "cnn",
            "dataset": {"path": str(path)},
            "epochs": epochs + 1,
            "precision": precision,
            "checkpoint_interval": 0,
            "params": {k: v for k, v in params.items() if k != "lr"},
        },
        "space": {"lr": {"type": "categorical", "choices": [params["lr"]]}},
        "search": {"n_trials": 1, "sampler": "random", "pruner": "none", "seed": 0},
        "cluster": {"n_workers": 1},
    }
    result = Study(spec, run_dir=folder).run()
    client, runs = _runs(result, "trial-vs-bare")
    history = client.get_metric_history(runs[0].info.run_id, "samples_per_s")
    trial_rate = statistics.median(m.value for m in history[1:])  # its first epoch warms up
    return [
        (
            f"bare trainer, {device}, {precision}",
            f"{bare_rate:.0f} samples/s",
            f"epoch {epoch_s:.1f} s ({tiles} x the digits at 32x32)",
        ),
        (
            "the same trial through Study.run",
            f"{trial_rate:.0f} samples/s",
            f"{trial_rate / bare_rate:.2f} of the bare trainer (goal: >= 0.95)",
        ),
    ]


def concurrency_rows(n_gpus: int, epochs: int, size: int, folder: Path) -> list[tuple]:
    from hpsearch import Study

    per = 2 if n_gpus >= 4 else 1
    sets = n_gpus // per
    name = "concurrent"
    with Utilisation() as util:
        start = time.time()
        result = Study(_spec(name, per, 2 * sets, epochs, size), run_dir=folder).run()
        wall = time.time() - start
    _, runs = _runs(result, name)
    devices = sorted(
        (int(r.data.tags["hpsearch.trial_number"]), r.data.tags.get("hpsearch.devices"))
        for r in runs
    )
    rows = [
        (
            f"{2 * sets} trials on {sets} set(s) of {per}",
            f"{wall:.1f} s",
            "; ".join(f"#{n}: {d}" for n, d in devices),
        )
    ]
    rows.append(
        (
            "mean GPU utilisation over the study",
            f"{util.mean():.0f} %",
            f"{len(util.samples)} samples",
        )
    )
    return rows


def layout_rows(gpus: list[int], epochs: int, folder: Path, budget_s: float) -> list[tuple]:
    """ddp / fsdp / pipeline of one transformer on sets of 1, 2, 4, 8 GPUs, one trial each, on
    one local cluster (a leasing worker that owns every GPU: warm NCCL ranks), read back from
    MLflow as ``benchmarks/parallel.py`` does. Stops starting rows once the next one (as long
    as the last) would end after ``budget_s``."""
    import parallel as bench
    import torch
    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    sizes = [k for k in bench.SIZES if k <= len(gpus)]
    args = argparse.Namespace(
        cuda=True,
        epochs=epochs,
        search_epochs=2,
        width=512,
        depth=max(4, 2 * max(sizes) - 2),
        heads=8,
        batch_size=64,
        microbatches=4,
        max_chars=300_000,
        precision="bf16" if torch.cuda.is_bf16_supported() else "fp32",
    )
    plan = [(k, label, parallel) for k in sizes for label, parallel in bench.layouts(k, 4)]
    rows: list[tuple] = []
    start = time.perf_counter()
    cluster = start_local_cluster(gpus=gpus, gpus_per_trial=max(sizes), mixed_sizes=True)
    client = Client(cluster)
    base: float | None = None
    last = 0.0
    try:
        for k, label, parallel in plan:
            what = f"{k} GPU{'s' if k > 1 else ''}: {label}"
            if time.perf_counter() - start + last > budget_s:
                rows.append((what, "skipped", f"--layout-seconds {budget_s:.0f} reached"))
                continue
            t0 = time.perf_counter()
            try:
                r = bench.measure(k, label, parallel, args, client, folder)
            except Exception as exc:  # a failing layout is a result, not the end of the check
                rows.append((what, "FAIL", f"{type(exc).__name__}: {exc}"[:300]))
                continue
            finally:
                last = time.perf_counter() - t0
            base = base or r["rate"]

            def span(values: list[float]) -> str:
                lo, hi = min(values) / 2**20, max(values) / 2**20
                return f"{hi:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"

            rows.append(
                (
                    what,
                    f"{r['rate']:.0f} samples/s ({r['rate'] / base:.2f}x the first row)",
                    f"MiB per rank: params {span(r['params'])}, params+grads+Adam "
                    f"{span(r['state'])}, peak allocated {span(r['peak'])}",
                )
            )
    finally:
        client.close()
        cluster.close(timeout=20)
    rows.append(
        (
            "layouts: the model",
            f"transformer width {args.width}, depth {args.depth}",
            f"{args.precision}, global batch {args.batch_size}, seq_len 64, {epochs} epochs, "
            f"{time.perf_counter() - start:.0f} s",
        )
    )
    return rows


def family_rows() -> list[tuple]:
    """Every model family for two epochs on cuda:0 under fp32, bf16 and fp16 autocast."""
    from hpsearch.testing.families import CASES, train_briefly

    rows = []
    for case in CASES:
        for precision in ("fp32", "bf16", "fp16"):
            try:
                run = train_briefly(case, precision, epochs=2, device="cuda:0")
            except Exception as exc:  # a failing family is a result, not the end of the check
                traceback.print_exc()
                rows.append((f"{case}, {precision}", "FAIL", f"{type(exc).__name__}: {exc}"[:80]))
                continue
            last = run["epochs"][-1]
            key = {"gan": "val_mmd"}.get(
                case,
                "val_perplexity"
                if case.endswith("text") and "val_perplexity" in last
                else "val_accuracy",
            )
            rows.append(
                (
                    f"{case}, {precision}",
                    f"{key} {last[key]:.3f}",
                    f"{last['samples_per_s']:.0f} samples/s, "
                    f"skipped fp16 steps {run['trainer'].skipped_steps}",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--size", type=int, default=64, help="digits resized to size x size")
    parser.add_argument(
        "--layout-seconds",
        type=float,
        default=150.0,
        help="time cap of the layout rows (ddp / fsdp / pipeline); 0 leaves them out",
    )
    parser.add_argument(
        "--min-epoch-seconds",
        type=float,
        default=2.0,
        help="the trial-vs-bare rows tile the data until one epoch takes at least this long",
    )
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_check needs a CUDA device (torch.cuda.is_available() is False)")
    from hpsearch.cluster import discover_gpus

    gpus = discover_gpus()
    print(json.dumps([g.__dict__ for g in gpus]), file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-gpu-"))
    names = ", ".join(sorted({f"{g.name} ({g.memory_mib} MiB)" for g in gpus}))
    print(
        f"\nGPU check — {len(gpus)} x {names}, torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}\n",
        flush=True,
    )
    sections = [
        ("precision", lambda: precision_rows(args.epochs, args.size)),
        ("families", family_rows),
        (
            "trial vs bare",
            lambda: trial_vs_bare_rows(args.epochs, folder, min_epoch_s=args.min_epoch_seconds),
        ),
        ("scaling", lambda: scaling_rows(len(gpus), args.epochs, args.size, folder)),
        ("concurrency", lambda: concurrency_rows(len(gpus), args.epochs, args.size, folder)),
        ("packing", lambda: packing_rows(folder)),
    ]
    if args.layout_seconds > 0:
        indices = [g.index for g in gpus]
        sections.append(
            ("layouts", lambda: layout_rows(indices, args.epochs, folder, args.layout_seconds))
        )
    rows: list[tuple] = []
    for what, section in sections:
        # Each section's rows print as soon as they are measured: a check cut short by its
        # time limit still shows what it got.
        start = time.perf_counter()
        try:
            new = section()
        except Exception as exc:
            traceback.print_exc()
            new = [(what, "FAIL", f"{type(exc).__name__}: {exc}"[:300])]
        rows += new
        print(f"{what} ({time.perf_counter() - start:.0f} s):", flush=True)
        print(table(["check", "result", "detail"], new), flush=True)
    print("\nall rows:\n" + table(["check", "result", "detail"], rows), flush=True)


if __name__ == "__main__":
    main()
