"""The trial every system of ``benchmarks/peers.py`` runs: the digits CNN, data, configurations.

Imports only torch and scikit-learn (and the standard library), so that hpsearch's
environment and the Ray Tune venv run the very same code. Training is deterministic for a
configuration: the model is seeded by the configuration's index and each epoch's batch order
and dropout by (index, epoch), so a trial resumed from its checkpoint trains exactly as one
run straight through, and every system finds the same accuracy for the same trial.

Run as a script, it is the compute floor: each configuration trained for every epoch, one
after another in this bare process, timing each epoch (training and validation)::

    python benchmarks/_peers_model.py --configs 40 --epochs 9   # prints one JSON line
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
from typing import Any

#: One epoch is this many passes over the training images.
PASSES = 4
BATCH = 64
CHANNELS = (8, 16, 32)


def configs(n: int) -> list[dict[str, Any]]:
    """The first ``n`` of a fixed list of configurations (the same for any ``n``)."""
    rng = random.Random(0)
    out = []
    for index in range(n):
        lr = float(f"{10 ** rng.uniform(-3.5, -1.5):.3g}")
        channels = rng.choice(CHANNELS)
        dropout = round(rng.uniform(0.0, 0.5), 2)
        out.append({"index": index, "lr": lr, "channels": channels, "dropout": dropout})
    return out


@functools.lru_cache(maxsize=1)
def load_data() -> tuple[Any, Any, Any, Any]:
    """scikit-learn's digits, scaled to [0, 1]: 1,437 training and 360 validation images
    (``train_test_split`` with ``test_size=0.2``, ``random_state=0``)."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0)

    def images(a: Any) -> Any:
        return torch.tensor(a, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0

    return images(x_train), torch.tensor(y_train), images(x_val), torch.tensor(y_val)


class DigitsTrial:
    """One configuration's model and optimizer; ``epoch`` counts from 1."""

    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        from torch import nn

        torch.set_num_threads(1)
        self.config = config
        torch.manual_seed(int(config["index"]))
        c = int(config["channels"])
        self.model = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Dropout(float(config["dropout"])),
            nn.Linear(2 * c * 16, 10),
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=float(config["lr"]))

    def train_epoch(self, epoch: int) -> float:
        """``PASSES`` passes over the training images; returns the last batch's loss."""
        import torch
        from torch import nn

        x, y, _, _ = load_data()
        generator = torch.Generator().manual_seed(int(self.config["index"]) * 1000 + epoch)
        torch.manual_seed(int(self.config["index"]) * 1000 + epoch)  # dropout
        self.model.train()
        loss = torch.tensor(0.0)
        for _ in range(PASSES):
            order = torch.randperm(len(x), generator=generator)
            for i in range(0, len(x), BATCH):
                idx = order[i : i + BATCH]
                self.optimizer.zero_grad()
                loss = nn.functional.cross_entropy(self.model(x[idx]), y[idx])
                loss.backward()
                self.optimizer.step()
        return float(loss.detach())

    def evaluate(self) -> float:
        """Validation accuracy."""
        import torch

        _, _, x, y = load_data()
        self.model.eval()
        with torch.no_grad():
            return float((self.model(x).argmax(1) == y).float().mean())

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def floor(n_configs: int, epochs: int) -> dict[str, Any]:
    """Seconds and validation accuracy of every (configuration, epoch), trained serially."""
    load_data()
    seconds: list[list[float]] = []
    accuracy: list[list[float]] = []
    start = time.perf_counter()
    for config in configs(n_configs):
        trial = DigitsTrial(config)
        seconds.append([])
        accuracy.append([])
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            trial.train_epoch(epoch)
            acc = trial.evaluate()
            seconds[-1].append(time.perf_counter() - t0)
            accuracy[-1].append(acc)
    return {"seconds": seconds, "accuracy": accuracy, "total": time.perf_counter() - start}


def main() -> None:
    p = argparse.ArgumentParser(description="the compute floor: every trial, serially")
    p.add_argument("--configs", type=int, default=40)
    p.add_argument("--epochs", type=int, default=9)
    args = p.parse_args()
    json.dump(floor(args.configs, args.epochs), sys.stdout)
    print()


if __name__ == "__main__":
    main()
