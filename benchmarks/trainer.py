"""Training throughput: hpsearch's CNN trial against a hand-written PyTorch loop.

The same model, data, batch size, precision and thread count, side by side in one process.
The hpsearch side is a real trial: it runs through the trial runner with a real Optuna study
served over the gRPC proxy, reports and asks the pruner every epoch, logs to a real MLflow
store and writes a checkpoint every epoch. Samples/s count training samples over the whole
wall time of each side (evaluation included on both).

    python benchmarks/trainer.py [--epochs 8] [--repeats 3] [--precisions fp32,bf16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
import torch
from _common import machine, table

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")

PARAMS = {"batch_size": 64, "channels": 32, "lr": 1e-3, "optimizer": "adam", "dropout": 0.1}


def hand_loop(epochs: int, precision: str, size: int = 8) -> float:
    """The plain alternative: what one would write by hand for the same training."""
    from sklearn.datasets import load_digits
    from torch import nn

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    if size != 8:
        x = torch.nn.functional.interpolate(
            x, size=(size, size), mode="bilinear", align_corners=False
        )
    y = torch.tensor(bunch.target)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=g)
    n_val = round(len(x) * 0.2)
    xv, yv, xt, yt = x[order[:n_val]], y[order[:n_val]], x[order[n_val:]], y[order[n_val:]]
    c = PARAMS["channels"]
    model = nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * c * (size // 4) ** 2, 64),
        nn.ReLU(),
        nn.Dropout(PARAMS["dropout"]),
        nn.Linear(64, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=PARAMS["lr"])
    loss_fn = nn.CrossEntropyLoss()
    bs = PARAMS["batch_size"]
    amp = precision == "bf16"
    start = time.perf_counter()
    n = 0
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(xt), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(perm), bs):
            idx = perm[i : i + bs]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            n += len(idx)
        model.eval()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            (model(xv).float().argmax(1) == yv).double().mean().item()
    return n / (time.perf_counter() - start)


def _serve(url: str, ports, stop) -> None:  # type: ignore[no-untyped-def]
    """The coordinator's part: serve the study over the gRPC proxy, from another process."""
    from hpsearch.storage import StorageProxy, open_storage

    proxy = StorageProxy(open_storage(url)).start()
    ports.put(proxy.address.port)
    stop.wait()
    proxy.stop()


class _Bench:
    """A real study served from another process (as by a coordinator) and a real tracking store."""

    def __init__(
        self,
        epochs: int,
        precision: str,
        size: int,
        folder: Path,
        checkpoint_interval: float | None,
    ) -> None:
        import multiprocessing as mp

        from hpsearch.spec import StudySpec
        from hpsearch.storage import ProxyAddress, open_storage
        from hpsearch.tracking import StudyTracker
        from hpsearch.trial._layout import RunLayout

        self.spec = StudySpec.from_dict(
            {
                "name": f"bench-{precision}-{size}",
                "objective": {
                    "model": "cnn",
                    "dataset": {"name": "digits", "size": size},
                    "epochs": epochs,
                    "precision": precision,
                    **(
                        {"checkpoint_interval": checkpoint_interval}
                        if checkpoint_interval is not None
                        else {}
                    ),
                    "params": {k: v for k, v in PARAMS.items() if k in ("batch_size", "optimizer")},
                },
                "space": {
                    "lr": {"type": "float", "low": 1e-3, "high": 1e-3 * 1.0000001},
                    "channels": {"type": "int", "low": 32, "high": 32},
                    "dropout": {"type": "float", "low": 0.1, "high": 0.1 * 1.0000001},
                },
                "search": {
                    "n_trials": 100,
                    "sampler": "random",
                    "pruner": {"name": "median", "n_startup_trials": 10000},
                },  # asks the pruner every epoch, never prunes
            }
        )
        self.layout = RunLayout.of(folder, self.spec.name)
        self.layout.create()
        storage = open_storage(self.layout.default_storage_url)
        self.study = optuna.create_study(
            study_name=self.spec.name, storage=storage, direction="maximize"
        )
        ctx = mp.get_context("spawn")
        ports, self._stop = ctx.Queue(), ctx.Event()
        self._server = ctx.Process(
            target=_serve, args=(self.layout.default_storage_url, ports, self._stop), daemon=True
        )
        self._server.start()
        self.address = ProxyAddress("127.0.0.1", ports.get(timeout=60))
        tracker = StudyTracker(
            self.layout.default_mlflow_uri,
            self.spec.name,
            self.spec.name,
            metric="val_accuracy",
            artifact_root=self.layout.mlflow_artifacts,
        )
        self.target = tracker.open(storage_url="bench", tags={}, spec_yaml="")

    def close(self) -> None:
        self._stop.set()
        self._server.join(10)

    def trial(self) -> float:
        from hpsearch.search._space import to_distributions
        from hpsearch.trial import TrialTask
        from hpsearch.worker._runner import run_trial

        trial = self.study.ask(to_distributions(self.spec.space))
        task = TrialTask(
            self.spec.name,
            trial._trial_id,
            trial.number,
            self.spec,
            self.address,
            self.target,
            str(self.layout.study_dir),
            [],
        )
        start = time.perf_counter()
        outcome = run_trial(task)
        seconds = time.perf_counter() - start
        assert outcome.state == "COMPLETE", outcome
        self.study.tell(trial, outcome.value)
        n_train = 1797 - round(1797 * 0.2)
        return n_train * self.spec.objective.epochs / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument(
        "--sizes",
        default="8,28",
        help="image sizes: 8 is digits as shipped, 28 resized (12x the compute per epoch)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        default=None,
        help="override objective.checkpoint_interval (0: every epoch)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import os

    os.environ["HPSEARCH_THREADS"] = str(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-trainer-"))
    rows = []
    for size in [int(v) for v in args.sizes.split(",")]:
        for precision in args.precisions.split(","):
            bench = _Bench(args.epochs, precision, size, folder, args.checkpoint_interval)
            bench.trial()  # warm up both paths: imports, data, first-epoch allocations
            hand_loop(1, precision, size)
            hand, ours = [], []
            for _ in range(args.repeats):  # interleaved, so drifts of the machine hit both
                hand.append(hand_loop(args.epochs, precision, size))
                ours.append(bench.trial())
            h, o = statistics.median(hand), statistics.median(ours)
            rows.append((f"{size}x{size}", precision, f"{h:.0f}", f"{o:.0f}", f"{o / h:.3f}"))
            bench.close()
            print(f"done: {size}x{size} {precision}", file=sys.stderr)
    from hpsearch.tracking import flush

    flush()
    ckpt = "default" if args.checkpoint_interval is None else f"{args.checkpoint_interval:g} s"
    print(
        f"\nCNN on digits, batch {PARAMS['batch_size']}, {args.epochs} epochs, "
        f"{args.threads} thread(s), checkpoint interval {ckpt}, median of {args.repeats} "
        f"— {machine()}\n"
    )
    print(
        table(
            [
                "images",
                "precision",
                "hand-written loop samples/s",
                "hpsearch trial samples/s",
                "ratio",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
