"""Raw study data validated section by section, every problem collected before one
:class:`~hpsearch.exceptions.SpecError` (the checks behind :class:`~hpsearch.spec.StudySpec`).

Each function here reads the raw data and reports to the problems it is given, in the order
the study file's sections are checked; none changes the data it reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpsearch._imports import load_user_objective
from hpsearch.exceptions import SpecError
from hpsearch.spec._checks import (
    _check_dataset_for,
    _check_fsdp,
    _check_objective_metrics,
    _check_objectives,
    _check_parallel,
    _check_sampler,
    _check_scheduler,
    _check_strategy,
    _validate_strategies,
)
from hpsearch.spec._cluster import ClusterSpec, _check_backend
from hpsearch.spec._messages import _Problems, _show, _Spec
from hpsearch.spec._params import _validate_space
from hpsearch.spec._search import PRUNER_CLASSES, PrunerSpec, SamplerSpec, SearchSpec
from hpsearch.spec._sections import ObjectiveSpec, TrackingSpec
from hpsearch.spec._share import ShareSpec, _check_searched_sizes, _renamed_cluster_keys
from hpsearch.spec._simulated import SURROGATE_MODELS, check_simulated, default_space

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")

#: The study's sections, each validated by its model, in this order.
_SECTIONS: dict[str, type[_Spec]] = {
    "objective": ObjectiveSpec,
    "search": SearchSpec,
    "cluster": ClusterSpec,
    "tracking": TrackingSpec,
    "share": ShareSpec,
}


def _collect(data: Any, label: str, source: Path | None, *, known: Sequence[str]) -> dict[str, Any]:
    """Validate raw study data section by section; raise one SpecError with every problem.

    ``known``: the study's top-level keys (any other is reported as unknown).
    """
    problems = _Problems(label)
    if not isinstance(data, Mapping):
        problems.add("", f"the study file must be a mapping of keys, got {_show(data)}")
        raise SpecError(problems.lines)
    problems.unknown_keys("", data, known)
    out: dict[str, Any] = {"source": source}
    out["name"] = _checked_name(data.get("name"), problems)
    out["storage"] = _checked_storage(data.get("storage"), problems)

    strategies = _strategies(data, problems)
    for key, model in _SECTIONS.items():
        out[key] = _section(key, model, data.get(key), strategies, problems)

    _check_backend(out.get("cluster"), problems, out.get("storage"))
    check_simulated(data.get("objective"), out.get("cluster"), problems, source)
    raw_space = _raw_space(data, source)
    space = _validate_space(raw_space, problems)
    space_ok = isinstance(raw_space, Mapping) and len(space) == len(raw_space)
    out["space"] = space

    raw_objective = data.get("objective")
    _check_searched_or_fixed(raw_objective, raw_space, problems)
    _check_objectives(raw_objective, strategies, problems)
    _check_raw_objective(raw_objective, space, source, problems)
    objective: ObjectiveSpec | None = out["objective"]
    _check_model(objective, space, space_ok, source, problems)
    if objective is not None and space_ok:
        _check_parallel(objective, space, problems)
    _check_searched_sizes(space, problems)
    _check_strategies(strategies, space, space_ok, problems)
    _check_scheduler(data.get("search"), out.get("search"), out.get("objective"), problems, space)

    if problems.lines:
        raise SpecError(problems.lines)
    return out


def _checked_name(name: Any, problems: _Problems) -> Any:
    """``name``, as given; reported when missing or not made of letters, digits, '-', '_'
    and '.'."""
    if name is None:
        problems.add("name", "required; give the study a name of letters, digits, '-', '_', '.'")
    elif not isinstance(name, str) or not _NAME_RE.match(name):
        problems.add(
            "name", f"must contain only letters, digits, '-', '_' and '.', got {_show(name)}"
        )
    return name


def _checked_storage(storage: Any, problems: _Problems) -> Any:
    """``storage``, as given; reported when it is there and not a string (a URL)."""
    if storage is not None and not isinstance(storage, str):
        problems.add("storage", f"expected an Optuna storage URL, got {_show(storage)}")
    return storage


def _scheduled(raw_search: Any) -> bool:
    """Whether the raw ``search`` section names a scheduler (anything but ``none``)."""
    return isinstance(raw_search, Mapping) and (
        str(raw_search.get("scheduler", "none")).lower() != "none"
    )


def _several_objectives(raw_objective: Any) -> bool:
    """Whether the raw ``objective`` section lists several metrics (``objective.metrics``)."""
    return isinstance(raw_objective, Mapping) and raw_objective.get("metrics") is not None


def _strategies(data: Mapping[str, Any], problems: _Problems) -> dict[str, Any]:
    """``search.sampler`` and ``search.pruner``, validated on their own (a broken one maps
    to None), so that their option checks run even when another search field is wrong.

    With several objectives and no scheduler the default pruner is the pareto one: Optuna's
    pruners rank one value (a scheduler ranks its rungs by Pareto fronts itself).
    """
    strategies = _validate_strategies(data.get("search"), problems)
    if _several_objectives(data.get("objective")) and not _scheduled(data.get("search")):
        strategies.setdefault("pruner", PrunerSpec(name="pareto"))
    return strategies


def _section(
    key: str,
    model: type[_Spec],
    raw: Any,
    strategies: Mapping[str, Any],
    problems: _Problems,
) -> Any:
    """One section validated by its model (``None`` for a missing ``objective``, which is
    reported); a missing section is its defaults."""
    if key == "cluster":
        raw = _renamed_cluster_keys(raw, problems, problems.label)
    if raw is None and key == "objective":
        problems.add("objective", "required; at least objective.model")
        return None
    if raw is None:
        raw = {}
    if key == "search" and isinstance(raw, Mapping):
        raw = _search_with(raw, strategies)
    return problems.validate(model, raw, key)


def _search_with(raw_search: Mapping[str, Any], strategies: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the raw ``search`` section with the sampler and pruner already validated
    (see :func:`_strategies`; a broken one is already reported, and left out here). A
    scheduler replaces the pruner where none is given."""
    search = {k: v for k, v in raw_search.items() if k not in ("sampler", "pruner")}
    search.update({k: v for k, v in strategies.items() if v is not None})
    if _scheduled(search) and "pruner" not in strategies:
        search["pruner"] = PrunerSpec(name="none")
    return search


def _raw_space(data: Mapping[str, Any], source: Path | None) -> Any:
    """The raw ``space``: as given, else the objective's default one (a surrogate's), else
    none."""
    raw_space = data.get("space")
    if raw_space is None:
        raw_space = default_space(data.get("objective"), source) or {}
    return raw_space


def _check_searched_or_fixed(raw_objective: Any, raw_space: Any, problems: _Problems) -> None:
    """A hyperparameter is either searched (``space``) or fixed (``objective.params``)."""
    raw_params = raw_objective.get("params") if isinstance(raw_objective, Mapping) else None
    if not (isinstance(raw_params, Mapping) and isinstance(raw_space, Mapping)):
        return
    for key in raw_space:
        if key in raw_params:
            problems.add(
                f"space.{key}",
                "also fixed in objective.params; a hyperparameter is either searched or "
                "fixed, remove it from one",
            )


def _check_raw_objective(
    raw_objective: Any, space: Mapping[str, Any], source: Path | None, problems: _Problems
) -> None:
    """The checks of the raw ``objective`` that read other fields with it: a user
    objective's metrics, the data set for the model, the FSDP settings against the space."""
    if not isinstance(raw_objective, Mapping):
        return
    model_name = raw_objective.get("model")
    if isinstance(model_name, str) and ":" in model_name:
        _check_objective_metrics(raw_objective, None, problems)
    _check_dataset_for(raw_objective, source, problems)
    _check_fsdp(raw_objective, space, problems)


def _check_model(
    objective: ObjectiveSpec | None,
    space: Mapping[str, Any],
    space_ok: bool,
    source: Path | None,
    problems: _Problems,
) -> None:
    """A user objective (``package.module:function``) must load; a built-in model other than
    a surrogate needs at least one searched hyperparameter."""
    if objective is None:
        return
    if ":" in objective.model:
        _check_user_objective(objective.model, source, problems)
    elif space_ok and not space and objective.model not in SURROGATE_MODELS:
        problems.add(
            "space",
            f"the built-in model {objective.model!r} needs at least one searched hyperparameter",
        )


def _check_user_objective(model: str, source: Path | None, problems: _Problems) -> None:
    """Load the user objective ``model`` from the working folder or the study file's; what
    keeps it from loading is reported, line by line. It runs nothing of the objective."""
    paths = [Path.cwd()] + ([source.parent] if source is not None else [])
    try:
        load_user_objective(model, paths)
    except SpecError as exc:
        for line in exc.problems:
            field, _, message = line.partition(": ")
            problems.add(field, message)


def _check_strategies(
    strategies: Mapping[str, Any], space: Mapping[str, Any], space_ok: bool, problems: _Problems
) -> None:
    """The sampler (TPE where none is given) against the space, and the pruner's options
    against its class (the pareto pruner has none)."""
    sampler = strategies.get("sampler", SamplerSpec(name="tpe"))
    if sampler is not None:
        _check_sampler(sampler, space, space_ok, problems)
    pruner = strategies.get("pruner")
    if pruner is not None and pruner.name != "pareto":
        _check_strategy("pruner", pruner, {**PRUNER_CLASSES, "pareto": ""}, problems)
