"""``cluster.simulated``: a cluster in virtual time, and the surrogate models that run on it
(``objective.model: lcbench | synthetic``, see :mod:`hpsearch.simulation`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from hpsearch.spec._messages import (
    _allowed,
    _Bool,
    _duration,
    _Int,
    _Problems,
    _Seconds,
    _show,
    _Spec,
)

#: Models whose epochs are a benchmark's recorded curves: they run on the simulated cluster.
SURROGATE_MODELS: tuple[str, ...] = ("lcbench", "synthetic", "replay")


_Duration = Annotated[float, BeforeValidator(_duration)]


class SimulatedSpec(_Spec):
    """The simulated cluster: its workers, how often one is lost, and what is recorded."""

    workers: _Int = Field(default=4, ge=1, description="Simulated workers. Default 4.")
    gpus_per_worker: _Int = Field(
        default=1, ge=1, description="Devices of each simulated worker. Default 1."
    )
    worker_mtbf: _Seconds = Field(
        default=None,
        description=(
            "Mean time between two losses of one worker ('6h', '30m' or seconds), drawn "
            "exponentially; its trial resumes from its last checkpoint. Default null: none "
            "is lost."
        ),
    )
    restart: _Seconds = Field(
        default=60.0,
        description="Seconds until a lost worker is back. Default 60.",
    )
    startup: _Seconds = Field(
        default=None,
        description=(
            "Seconds each start of a trial takes before its first epoch (process, data, "
            "model). Default null: none."
        ),
    )
    seed: _Int = Field(default=0, description="Seed of the worker losses. Default 0.")
    tracking: _Bool = Field(
        default=False,
        description=(
            "Record the study in MLflow too (tracking.mlflow_uri), as a real study does: its "
            "run and one nested run per trial, at their simulated times. Default false."
        ),
    )
    restart_coordinator_at: list[_Duration] = Field(
        default_factory=list,
        description=(
            "Virtual times at which the coordinator is killed and started again, as after a "
            "crash: its trials resume from their checkpoints. Default []."
        ),
    )


def surrogate_of(raw_objective: Any) -> str | None:
    """The surrogate model an objective names (``lcbench``, ``synthetic``), or None."""
    if not isinstance(raw_objective, Mapping):
        return None
    model = raw_objective.get("model")
    return model if isinstance(model, str) and model in SURROGATE_MODELS else None


def surrogate_instance(bench: Any, dataset: Any) -> tuple[str | None, str | None]:
    """The benchmark instance ``objective.dataset`` names, or why it names none."""
    if dataset in (None, "digits"):  # the default data set: the benchmark's first instance
        return bench.instances[0], None
    if isinstance(dataset, str):
        dataset = {"name": dataset}
    if not isinstance(dataset, Mapping):
        return None, f"expected {{name: {bench.name}, instance: ...}}, got {_show(dataset)}"
    keys = {"name", "study"} if bench.name == "replay" else {"name", "instance"}
    unknown = sorted(set(dataset) - keys)
    if unknown:
        return None, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(keys))})"
    if bench.name == "replay":
        return bench.instances[0], None
    if dataset.get("name", bench.name) != bench.name:
        return None, f"the {bench.name} model runs on its own data set: name: {bench.name}"
    instance = str(dataset.get("instance", bench.instances[0]))
    if instance not in bench.instances:
        shown = ", ".join(bench.instances[:8]) + (", ..." if len(bench.instances) > 8 else "")
        return None, f"unknown {bench.name} instance {instance!r} (instances: {shown})"
    return instance, None


def _bench(raw_objective: Mapping[str, Any], source: Path | None) -> Any:
    from hpsearch.data.surrogates import benchmark_of

    return benchmark_of(str(raw_objective["model"]), raw_objective.get("dataset"), source)


def default_space(raw_objective: Any, source: Path | None = None) -> dict[str, Any] | None:
    """A surrogate model's own search space (the study's space when it gives none)."""
    if surrogate_of(raw_objective) is None:
        return None
    from hpsearch.exceptions import MissingExtra

    try:
        return dict(_bench(raw_objective, source).space())
    except (MissingExtra, ValueError):
        return {}  # the model's check says what is wrong


def check_simulated(
    raw_objective: Any, cluster: Any, problems: _Problems, source: Path | None = None
) -> None:
    """A surrogate model runs on the simulated cluster only, and the simulated cluster runs
    surrogate models only; the instance, metric and epochs are the benchmark's."""
    name = surrogate_of(raw_objective)
    backend = getattr(cluster, "backend", "local")
    if name is None:
        if backend == "simulated":
            problems.add(
                "cluster.backend",
                "simulated runs a benchmark's recorded curves: objective.model must be one of "
                + ", ".join(SURROGATE_MODELS),
            )
        return
    if cluster is not None and backend != "simulated":
        problems.add(
            "objective.model",
            f"{name} is a surrogate benchmark: it runs on the simulated cluster only "
            "(cluster.backend: simulated)",
        )
    from hpsearch.exceptions import MissingExtra

    try:
        bench = _bench(raw_objective, source)
    except MissingExtra as exc:
        problems.add("objective.model", str(exc))
        return
    except ValueError as exc:
        problems.add("objective.dataset", str(exc))
        return
    _, why = surrogate_instance(bench, raw_objective.get("dataset"))
    if why is not None:
        problems.add("objective.dataset", why)
    metric = raw_objective.get("metric")
    if isinstance(metric, str) and metric not in bench.metrics:
        problems.add(
            "objective.metric", f"{name} has no metric {metric!r} {_allowed(bench.metrics)}"
        )
    if raw_objective.get("metrics") is not None:
        problems.add("objective.metrics", f"{name} optimizes one metric here; use metric")
    epochs = raw_objective.get("epochs")
    if isinstance(epochs, int) and epochs > bench.max_epochs:
        problems.add(
            "objective.epochs", f"{name} has {bench.max_epochs} epochs at most, got {epochs}"
        )
