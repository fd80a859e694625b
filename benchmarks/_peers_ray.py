"""Ray Tune's side of ``benchmarks/peers.py``, run with the interpreter of its own venv
(``benchmarks/.ray-venv``: Ray is never a dependency of hpsearch).

A function trainable of the same digits CNN (``_peers_model``), one CPU each, 2 trials at a
time on a 2-CPU Ray, ``reuse_actors=True``, the configurations in the order given
(``tune.grid_search``), FIFO or ASHA (stop-only: ``ASHAScheduler``, grace period 1,
reduction factor 3, one bracket). With ``--checkpoint`` each epoch's report carries the
trial's checkpoint, as hpsearch's objective saves one every epoch.

    .ray-venv/bin/python benchmarks/_peers_ray.py --order 0,1,2,3 --configs 4 --epochs 2 \\
        --scheduler fifo|asha [--checkpoint] --folder DIR      # writes DIR/result.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers_model import DigitsTrial, configs

SLOTS = 2


def trainable(params: dict[str, Any]) -> None:
    import torch
    from ray import tune

    run = DigitsTrial(configs(params["n_configs"])[params["config"]])
    first = 1
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"), weights_only=False)
        run.load(state)
        first = int(state["epoch"]) + 1
    for epoch in range(first, params["epochs"] + 1):
        run.train_epoch(epoch)
        metrics = {"val_accuracy": run.evaluate(), "epoch": epoch}
        if params["checkpoint"]:
            with tempfile.TemporaryDirectory() as folder:
                torch.save({"epoch": epoch, **run.state()}, os.path.join(folder, "state.pt"))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--order", required=True, help="configuration indices, comma-separated")
    p.add_argument("--configs", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--scheduler", choices=["fifo", "asha"], required=True)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--folder", type=Path, required=True)
    args = p.parse_args()

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    order = [int(i) for i in args.order.split(",")]
    start = time.perf_counter()
    ray.init(num_cpus=SLOTS, include_dashboard=False, logging_level="ERROR")
    init_s = time.perf_counter() - start
    scheduler = (
        ASHAScheduler(max_t=args.epochs, grace_period=1, reduction_factor=3, brackets=1)
        if args.scheduler == "asha"
        else FIFOScheduler()
    )
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={
            "config": tune.grid_search(order),
            "n_configs": args.configs,
            "epochs": args.epochs,
            "checkpoint": args.checkpoint,
        },
        tune_config=tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            scheduler=scheduler,
            num_samples=1,
            max_concurrent_trials=SLOTS,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=f"peers-{args.scheduler}",
            storage_path=str(args.folder.resolve()),
            verbose=0,
        ),
    )
    fit_start = time.perf_counter()
    results = tuner.fit()
    fit_s = time.perf_counter() - fit_start
    trials = []
    for result in results:
        metrics = result.metrics or {}
        trials.append(
            {
                "config": result.config["config"],
                "epochs": int(metrics.get("training_iteration", 0)),
                "value": metrics.get("val_accuracy"),
                "error": None if result.error is None else repr(result.error)[:300],
                "checkpoint": result.checkpoint is not None,
            }
        )
    ray.shutdown()
    result = {"init_s": init_s, "fit_s": fit_s, "trials": trials}
    (args.folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
