"""Overrides of a study file's values (CLI flags, keyword arguments): short aliases and dotted
keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from hpsearch.spec._messages import _did_you_mean, _fields, _Problems

OVERRIDE_ALIASES: dict[str, str] = {
    "n_trials": "search.n_trials",
    "timeout": "search.timeout",
    "seed": "search.seed",
    "max_concurrent": "search.max_concurrent",
    "n_workers": "cluster.n_workers",
    "address": "cluster.address",
    "scheduler": "cluster.address",
    "gpus": "cluster.gpus",
    "mlflow_uri": "tracking.mlflow_uri",
    "experiment": "tracking.experiment",
    "storage": "storage",
    "epochs": "objective.epochs",
    "precision": "objective.precision",
}
"""Short override names (as the CLI flags use them) and the dotted key each one sets."""


def _override_keys(spec: type[BaseModel]) -> list[str]:
    keys = [*OVERRIDE_ALIASES]
    for name, info in spec.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += [f"{name}.{field}" for field in _fields(annotation)]
        elif name != "source":
            keys.append(name)
    return keys


def _apply_overrides(
    data: dict[str, Any],
    overrides: Mapping[str, Any],
    problems: _Problems,
    spec: type[BaseModel],
) -> None:
    """Set each given override in ``data`` (in place); record unknown keys as problems.

    ``spec`` is the model whose fields (and its sections' fields) are the valid dotted keys.
    """
    valid = _override_keys(spec)
    for key, value in overrides.items():
        if value is None:
            continue
        dotted = OVERRIDE_ALIASES.get(key, key)
        parts = dotted.split(".")
        free = parts[0] == "space" or parts[:2] == ["objective", "params"]
        if not (dotted in valid or (free and len(parts) > (1 if parts[0] == "space" else 2))):
            problems.add(
                key,
                f"unknown override{_did_you_mean(key, valid)} "
                f"(allowed: {', '.join(OVERRIDE_ALIASES)}, "
                "or a dotted key such as search.n_trials or objective.params.batch_size)",
            )
            continue
        target = data
        for part in parts[:-1]:
            if not isinstance(target.get(part), dict):
                target[part] = dict(target[part]) if isinstance(target.get(part), Mapping) else {}
            target = target[part]
        target[parts[-1]] = value
