"""The GPU check's packing rows: 1, 2, 4 and 8 trials on one GPU (``gpus_per_trial`` 1, 1/2,
1/4, 1/8), each trial in its own worker process capped to its fraction of the GPU's memory.

Per row: the study's wall, trials per device-hour, the GPU's mean utilisation (NVML or
nvidia-smi) and the median samples/s of one trial. Data: the tiled digits of the check's
trial-vs-bare rows where they were written (an epoch of at least ``--min-epoch-seconds`` for
one trial alone), else the digits at 32x32.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from _common import Utilisation


def _spec(name: str, packed: int, dataset: dict, epochs: int, cluster: dict) -> dict:
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": dataset,
            "epochs": epochs,
            "precision": "auto",
            "gpus_per_trial": 1 if packed == 1 else f"1/{packed}",
            "checkpoint_interval": None,
            "params": {"batch_size": 256, "channels": 32, "n_blocks": 2},
        },
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
        "search": {"n_trials": 2 * packed, "sampler": "random", "pruner": "none", "seed": 0},
        "cluster": cluster,
    }


def packing_rows(
    folder: Path,
    *,
    epochs: int = 2,
    cluster: dict | None = None,
    dataset: dict | None = None,
    sizes: tuple[int, ...] = (1, 2, 4, 8),
    utilisation: type = Utilisation,
    device: str = "GPU",
) -> list[tuple]:
    """One row per packing: 1, 2, 4 and 8 trials per device (2 trials per place), on GPU 0
    unless ``cluster`` says otherwise (the CPU twin: ``{"slots": 1}``)."""
    from mlflow import MlflowClient

    from hpsearch import Study

    if dataset is None:
        tiled = folder / "tiled-digits.npz"
        dataset = {"path": str(tiled)} if tiled.exists() else {"name": "digits", "size": 32}
    rows: list[tuple] = []
    for packed in sizes:
        name = f"packed-{packed}"
        spec = _spec(name, packed, dataset, epochs, cluster or {"gpus": [0]})
        with utilisation() as util:
            start = time.time()
            result = Study(spec, run_dir=folder).run()
            wall = time.time() - start
        client = MlflowClient(tracking_uri=result.mlflow_uri)
        exp = client.get_experiment_by_name(name)
        rates = []
        for run in client.search_runs([exp.experiment_id]):
            if "hpsearch.trial_number" in run.data.tags:
                history = client.get_metric_history(run.info.run_id, "samples_per_s")
                rates += [m.value for m in history[-1:]]
        n = 2 * packed
        rows.append(
            (
                f"{packed} trial(s) per {device} ({n} trials, {epochs} epochs)",
                f"{n / (wall / 3600):.0f} trials/device-hour",
                f"wall {wall:.1f} s; {device} {util.mean():.0f} % busy; one trial "
                f"{statistics.median(rates) if rates else float('nan'):.0f} samples/s",
            )
        )
    return rows
