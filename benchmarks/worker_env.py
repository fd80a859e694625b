"""A trial's own code in a worker against a bare process, and the workers' memory over a study.

Two questions about the environment hpsearch gives its training processes
(``hpsearch/cluster/_env.py``):

1. **Speed.** The same epoch loop (a digits CNN, 32 channels, Adam, batch 64, one torch
   thread; each epoch 4 passes over the 1,437 training images) run as a task in four
   places, interleaved ``--repeat`` times: a bare Python process; a bare process with
   Dask's ``MALLOC_TRIM_THRESHOLD_=65536``; a worker of a plain Dask ``LocalCluster``
   (Dask's defaults); a worker of hpsearch's local cluster.
2. **Memory.** Dask sets that variable so that a worker's freed memory goes back to the OS
   at once. hpsearch trims once a trial ends instead. Each variant runs one
   ``hpsearch run`` of ``--trials`` short built-in CNN trials (1 epoch, channels 8-64, MLflow
   on) on 2 workers while the workers' RSS is sampled every 0.5 s: hpsearch's allocator
   (thresholds + a trim per trial), glibc's own (``HPSEARCH_MALLOC=keep``, no trim), and
   Dask's (``HPSEARCH_MALLOC=keep`` with ``MALLOC_TRIM_THRESHOLD_=65536``).

    python benchmarks/worker_env.py [--epochs 9] [--repeat 3] [--trials 500] [--parts speed,memory]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table

ROOT = Path(__file__).resolve().parent.parent


def epoch_loop(epochs: int, channels: int = 32) -> float:
    """Train the digits CNN for ``epochs`` epochs on one thread; returns its seconds."""
    import torch
    from sklearn.datasets import load_digits
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8)[:1437] / 16
    labels = torch.tensor(y)[:1437]
    model = nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(2 * channels * 16, 10),
    )
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    start = time.perf_counter()
    for _ in range(epochs * 4):
        order = torch.randperm(len(images))
        for i in range(0, len(images), 64):
            idx = order[i : i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(model(images[idx]), labels[idx]).backward()
            opt.step()
    return time.perf_counter() - start


def _bare(epochs: int, **env: str) -> float:
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"from worker_env import epoch_loop; print(epoch_loop({epochs}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _in_worker(client: object, epochs: int) -> float:
    return float(client.submit(epoch_loop, epochs, pure=False).result())  # type: ignore[attr-defined]


def speed(epochs: int, repeat: int) -> None:
    from distributed import Client, LocalCluster

    from hpsearch.cluster import start_local_cluster

    plain = LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None)
    ours = start_local_cluster(gpus=None, n_workers=1, n_slots=1)
    times: dict[str, list[float]] = {}
    with Client(plain) as c_plain, Client(ours) as c_ours:
        c_plain.submit(epoch_loop, 1).result()  # imports and first allocations, both sides
        c_ours.submit(epoch_loop, 1).result()
        for _ in range(repeat):
            for name, run in (
                ("bare process", lambda: _bare(epochs)),
                (
                    "bare + MALLOC_TRIM_THRESHOLD_",
                    lambda: _bare(epochs, MALLOC_TRIM_THRESHOLD_="65536"),
                ),
                ("Dask LocalCluster worker", lambda: _in_worker(c_plain, epochs)),
                ("hpsearch worker", lambda: _in_worker(c_ours, epochs)),
            ):
                times.setdefault(name, []).append(run())
    plain.close()
    ours.close()
    base = statistics.median(times["bare process"])
    rows = [
        [name, statistics.median(t), f"{min(t):.2f}-{max(t):.2f}", statistics.median(t) / base]
        for name, t in times.items()
    ]
    print(f"\nepoch loop, {epochs} epochs (median of {repeat}, seconds)")
    print(table(["where", "s", "range", "x bare"], rows))


STUDY = """\
name: rss
objective:
  model: cnn
  dataset: digits
  epochs: 1
  precision: fp32
  checkpoint_interval: null
  params: {{batch_size: 64}}
space:
  lr: {{type: float, low: 1.0e-3, high: 3.0e-2, log: true}}
  channels: {{type: int, low: 8, high: 64, step: 8}}
search: {{n_trials: {trials}, sampler: random, pruner: none, seed: 0}}
cluster: {{n_workers: 2}}
"""


def _rss(pid: int) -> dict[int, int]:
    """RSS of the worker processes below ``pid`` (the nannies' spawned processes)."""
    import psutil

    out = {}
    try:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if "spawn_main" in " ".join(child.cmdline()):
                    out[child.pid] = child.memory_info().rss
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return out


def memory(trials: int) -> None:
    variants = {
        "hpsearch (thresholds, trim per trial)": {},
        "glibc's own, no trim": {"HPSEARCH_MALLOC": "keep"},
        "Dask's MALLOC_TRIM_THRESHOLD_": {
            "HPSEARCH_MALLOC": "keep",
            "MALLOC_TRIM_THRESHOLD_": "65536",
        },
    }
    rows = []
    for name, extra in variants.items():
        with tempfile.TemporaryDirectory() as tmp:
            study = Path(tmp) / "rss.yaml"
            study.write_text(STUDY.format(trials=trials))
            env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
            start = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "hpsearch.cli", "run", str(study), "--run-dir", tmp],
                env={**env, **extra},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=tmp,
            )
            samples: list[tuple[float, int]] = []  # (time, largest worker RSS)
            while proc.poll() is None:
                rss = _rss(proc.pid)
                if len(rss) == 2:
                    samples.append((time.perf_counter() - start, max(rss.values())))
                time.sleep(0.5)
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                raise SystemExit(f"{name}: hpsearch run failed: {proc.stderr.read()[-2000:]!r}")
        if len(samples) < 4:
            raise SystemExit(f"{name}: too short to sample ({len(samples)} samples): more --trials")
        n = max(1, len(samples) // 10)
        first = statistics.median(r for _, r in samples[n : 2 * n])  # after start-up
        last = statistics.median(r for _, r in samples[-n:])
        peak = max(r for _, r in samples)
        mib = 1024 * 1024
        rows.append([name, wall, first / mib, last / mib, peak / mib])
    print(f"\nworker RSS over a {trials}-trial study (largest of 2 workers, MiB)")
    print(table(["allocator", "wall s", "RSS 10-20 %", "RSS last 10 %", "peak"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--parts", default="speed,memory")
    args = parser.parse_args()
    print(machine())
    parts = args.parts.split(",")
    if "speed" in parts:
        speed(args.epochs, args.repeat)
    if "memory" in parts:
        memory(args.trials)


if __name__ == "__main__":
    main()
