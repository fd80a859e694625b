"""Study specs (in file form) for tests and examples: small, fast, deterministic where possible."""

from __future__ import annotations

from typing import Any


def cnn_spec(
    name: str = "test-cnn", *, n_trials: int = 4, epochs: int = 3, n_workers: int = 2, **search: Any
) -> dict[str, Any]:
    """A CNN on digits with a small space; ``search`` entries override the search section."""
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": "digits",
            "metric": "val_accuracy",
            "direction": "maximize",
            "epochs": epochs,
            "precision": "fp32",
            "params": {"batch_size": 64},
        },
        "space": {
            "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
            "channels": {"type": "int", "low": 8, "high": 16, "step": 8},
        },
        "search": {"n_trials": n_trials, "sampler": "tpe", "pruner": "median", "seed": 0, **search},
        "cluster": {"n_workers": n_workers},
    }


def user_spec(
    name: str,
    objective: str,
    *,
    n_trials: int = 6,
    n_workers: int = 2,
    space: dict[str, Any] | None = None,
    **search: Any,
) -> dict[str, Any]:
    """A user-objective study; ``space`` defaults to one float ``x`` in [0, 1]."""
    return {
        "name": name,
        "objective": {"model": objective, "direction": "minimize", "epochs": 4},
        "space": space if space is not None else {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "search": {
            "n_trials": n_trials,
            "sampler": "random",
            "pruner": "median",
            "seed": 0,
            **search,
        },
        "cluster": {"n_workers": n_workers},
    }
