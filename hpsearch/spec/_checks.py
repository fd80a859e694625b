"""Checks that need more than one section: sampler and pruner options against Optuna's
constructors, the sampler against the space, the data set against the model."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hpsearch import data as _catalog
from hpsearch._imports import load_user_objective
from hpsearch.exceptions import SpecError
from hpsearch.spec._messages import _allowed, _did_you_mean, _Problems, _show
from hpsearch.spec._params import CategoricalParam, FloatParam
from hpsearch.spec._search import (
    SAMPLER_CLASSES,
    PrunerSpec,
    SamplerSpec,
    SearchSpec,
    _name_and_options,
)
from hpsearch.spec._sections import (
    BUILTIN_DATASETS,
    BUILTIN_MODELS,
    Strategy,
)

#: Built-in families that train under ``parallel: fsdp``.
FSDP_MODELS: tuple[str, ...] = ("cnn", "rnn", "lstm", "transformer")

# Constructor arguments hpsearch fills in itself, with the hint shown when a file sets them.
_SAMPLER_OWNED_OPTIONS: dict[str, str] = {
    "seed": "set search.seed instead",
    "search_space": "the grid is built from space",
}

# Constructor arguments whose values are Python objects (callables, samplers, trials), which a
# YAML file cannot express; recognised by their annotation.
_OBJECT_ANNOTATIONS = ("Callable", "Sampler", "Mutation", "Crossover", "FrozenTrial")


def _check_options(
    kind: str,
    name: str,
    options: Mapping[str, Any],
    class_name: str,
    field: str,
    problems: _Problems,
) -> None:
    import optuna

    module = optuna.samplers if kind == "sampler" else optuna.pruners
    parameters = inspect.signature(getattr(module, class_name)).parameters
    owned = _SAMPLER_OWNED_OPTIONS if kind == "sampler" else {}
    settable = [p for p in parameters if p not in owned]
    for option in options:
        where = f"{field}.{option}"
        if option in owned and option in parameters:
            problems.add(where, f"hpsearch sets {option!r} itself; {owned[option]}")
        elif option not in parameters:
            if not settable:
                problems.add(where, f"the {name} {kind} takes no options")
            else:
                problems.add(
                    where,
                    f"unknown option for the {name} {kind} ({module.__name__}.{class_name})"
                    f"{_did_you_mean(option, settable)} {_allowed(settable)}",
                )
        elif any(word in str(parameters[option].annotation) for word in _OBJECT_ANNOTATIONS):
            problems.add(where, "takes a Python object and cannot be set in a study file")


def _check_strategy(
    kind: str, spec: SamplerSpec | PrunerSpec, classes: Mapping[str, str], problems: _Problems
) -> bool:
    field = f"search.{kind}"
    if spec.name not in classes:
        allowed = list(classes)
        hint = _did_you_mean(spec.name, allowed)
        problems.add(field, f"unknown {kind} {spec.name!r}{hint} {_allowed(allowed)}")
        return False
    if spec.options:
        _check_options(kind, spec.name, spec.options, classes[spec.name], field, problems)
    return True


def _validate_strategies(raw_search: Any, problems: _Problems) -> dict[str, Any]:
    """Validate ``search.sampler`` and ``search.pruner``; a broken one maps to None."""
    if isinstance(raw_search, SearchSpec):
        return {"sampler": raw_search.sampler, "pruner": raw_search.pruner}
    if not isinstance(raw_search, Mapping):
        return {}
    built: dict[str, Any] = {}
    for key, model in (("sampler", SamplerSpec), ("pruner", PrunerSpec)):
        if key not in raw_search:
            continue
        raw = raw_search[key]
        if isinstance(raw, (str, Mapping, BaseModel)):
            built[key] = problems.validate(model, _name_and_options(raw), f"search.{key}")
        else:
            problems.add(
                f"search.{key}",
                f"expected a {key} name or a mapping {{name: ..., <options>}}, got {_show(raw)}",
            )
            built[key] = None
    return built


def _check_sampler(
    sampler: SamplerSpec, space: Mapping[str, Any], space_ok: bool, problems: _Problems
) -> None:
    if not _check_strategy("sampler", sampler, SAMPLER_CLASSES, problems):
        return
    if sampler.name == "cmaes" and importlib.util.find_spec("cmaes") is None:
        problems.add(
            "search.sampler", "the cmaes sampler needs the 'cmaes' package; pip install cmaes"
        )
    if sampler.name == "grid":
        if space_ok and not space:
            problems.add("search.sampler", "the grid sampler needs a non-empty space")
        for name, param in space.items():
            if isinstance(param, FloatParam) and param.step is None:
                problems.add(
                    f"space.{name}",
                    "the grid sampler needs a finite set of values: give this float a step, "
                    "or make it int or categorical",
                )


def _check_dataset_for(raw: Mapping[str, Any], source: Path | None, problems: _Problems) -> None:
    """The data set of a built-in model: known, readable, with known options, fit for the
    model, and the metric one the model reports on it."""
    model, dataset, metric = raw.get("model"), raw.get("dataset", "digits"), raw.get("metric")
    if not isinstance(model, str) or ":" in model or model not in BUILTIN_MODELS:
        return  # a user objective reads its own data; a bad model is reported already
    if isinstance(dataset, str) and ":" not in dataset and dataset not in BUILTIN_DATASETS:
        problems.add(
            "objective.dataset",
            f"unknown dataset {dataset!r}{_did_you_mean(dataset, BUILTIN_DATASETS)} "
            f"{_allowed(BUILTIN_DATASETS)}, a mapping {{path: data.npz}} or {{path: corpus.txt}}, "
            "or 'package.module:function'",
        )
        return
    if isinstance(dataset, Mapping):
        _, allowed = _catalog.option_keys(dataset)
        if "path" not in dataset and dataset.get("name") not in BUILTIN_DATASETS:
            name = dataset.get("name")
            problems.add(
                "objective.dataset.name" if name is not None else "objective.dataset",
                f"unknown dataset {name!r} {_allowed(BUILTIN_DATASETS)}"
                if name is not None
                else (
                    "a mapping needs 'name' (a built-in data set) or 'path' "
                    "(your .npz or .txt file)"
                ),
            )
            return
        problems.unknown_keys("objective.dataset", dataset, allowed)
    elif isinstance(dataset, str) and ":" in dataset:
        paths = [Path.cwd()] + ([source.parent] if source is not None else [])
        try:
            load_user_objective(dataset, paths)
        except SpecError as exc:
            for line in exc.problems:
                problems.add("objective.dataset", line.partition(": ")[2])
            return
    elif not isinstance(dataset, (str, Mapping)):
        return  # reported by the field's own check
    try:
        info = _catalog.describe(dataset, source=source)
    except ValueError as exc:
        field = (
            "objective.dataset.path"
            if isinstance(dataset, Mapping) and "path" in dataset
            else "objective.dataset"
        )
        problems.add(field, str(exc))
        return
    why = _catalog.check_for_model(info, model)
    if why is not None:
        problems.add("objective.dataset", why)
        return
    reported = _catalog.metrics_of(model, info.task)
    _check_objective_metrics(raw, reported, problems)
    if isinstance(metric, str) and metric not in reported:
        problems.add(
            "objective.metric",
            f"model {model!r} does not report {metric!r} on this data set "
            f"(it reports: {', '.join(reported)})",
        )


def _check_fsdp(raw: Mapping[str, Any], space: Mapping[str, Any], problems: _Problems) -> None:
    """A built-in family that cannot be sharded, asked to train under fsdp (fixed or searched).

    Read from the raw objective, so that it is reported even when another objective field is
    wrong too."""
    model = raw.get("model")
    if not isinstance(model, str) or model not in BUILTIN_MODELS or model in FSDP_MODELS:
        return
    why = (
        f"model {model!r} does not support the fsdp strategy (its trainer samples and evaluates "
        "the generator on each rank alone, which a sharded generator cannot do; fsdp supports "
        f"{', '.join(FSDP_MODELS)}); use ddp"
    )
    parallel = raw.get("parallel")
    strategy = parallel.get("strategy") if isinstance(parallel, Mapping) else parallel
    if isinstance(strategy, Strategy):
        strategy = strategy.value
    if isinstance(strategy, str) and strategy.lower() == Strategy.FSDP.value:
        problems.add("objective.parallel", why)
    searched = space.get("parallel.strategy")
    if isinstance(searched, CategoricalParam) and Strategy.FSDP.value in searched.choices:
        problems.add("space.parallel.strategy", why)


#: Built-in models that can be cut into pipeline stages.
PIPELINE_MODELS: tuple[str, ...] = ("transformer",)

#: Most values of a searched int range that the layout checks try.
_MAX_TRIED = 64


def _candidates(key: str, fixed: Any, space: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """The field that sets ``key`` and the values a trial may take: the searched ones (space
    key ``key``), else ``fixed`` (``objective.<key>``)."""
    from hpsearch.spec._params import CategoricalParam, IntParam

    param = space.get(key)
    if isinstance(param, CategoricalParam):
        return f"space.{key}", [getattr(c, "value", c) for c in param.choices]
    if isinstance(param, IntParam):
        return f"space.{key}", list(range(param.low, param.high + 1, param.step))[:_MAX_TRIED]
    return f"objective.{key}", [getattr(fixed, "value", fixed)]


def _searched_layouts_valid(parallel: Any, space: Mapping[str, Any], problems: _Problems) -> bool:
    """Every searched ``parallel.*`` key names a layout field, and each value it may take is
    one that field allows (checked as ``objective.parallel`` itself would be)."""
    from pydantic import ValidationError

    from hpsearch.spec._messages import _message

    fields = list(type(parallel).model_fields)
    ok = True
    for key in space:
        if not key.startswith("parallel."):
            continue
        name = key.removeprefix("parallel.")
        if name not in fields:
            keys = [f"parallel.{f}" for f in fields]
            problems.add(
                f"space.{key}", f"unknown layout key{_did_you_mean(key, keys)} {_allowed(keys)}"
            )
            ok = False
            continue
        for value in _candidates(key, None, space)[1]:
            try:
                type(parallel).model_validate({**parallel.model_dump(), name: value})
            except ValidationError as exc:
                problems.add(f"space.{key}", _message(exc.errors()[0], type(parallel)))
                ok = False
                break
    return ok


def _check_parallel(objective: Any, space: Mapping[str, Any], problems: _Problems) -> None:
    """The pipeline layout against the model, the trial's set size and the batch: a model
    that can be cut, stages that divide every set size, micro-batches that divide every
    pipeline's batch (also when the layout is searched)."""
    parallel = objective.parallel
    if not _searched_layouts_valid(parallel, space, problems):
        return
    strategy_field, strategies = _candidates("parallel.strategy", parallel.strategy, space)
    if Strategy.PIPELINE not in strategies:  # the raw values: a searched one as written
        return
    builtin = objective.model in BUILTIN_MODELS
    if builtin and objective.model not in PIPELINE_MODELS:
        problems.add(
            strategy_field,
            f"model {objective.model!r} cannot be cut into pipeline stages; the pipeline "
            f"strategy needs a model that can ({', '.join(PIPELINE_MODELS)}); use ddp or fsdp",
        )
        return
    if objective.precision.value == "fp16" and builtin:
        problems.add(
            "objective.precision",
            "a pipeline trial trains in fp32 or bf16 (fp16's grad scaler is not shared "
            "across stages)",
        )
    size_field, sizes = _candidates("gpus_per_trial", objective.gpus_per_trial, space)
    stages_field, stage_counts = _candidates("parallel.stages", parallel.stages, space)
    micro_field, micros = _candidates("parallel.microbatches", parallel.microbatches, space)
    _, schedules = _candidates("parallel.schedule", parallel.schedule, space)
    batch_field, batches = _candidates("batch_size", objective.params.get("batch_size", 64), space)
    batch_field = (
        "objective.params.batch_size" if batch_field == "objective.batch_size" else batch_field
    )
    per_rank = bool(objective.params.get("per_rank_batch"))
    said: set[str] = set()

    def once(field: str, message: str) -> None:
        if field not in said:
            said.add(field)
            problems.add(field, message)

    for size in sizes:
        for stages in stage_counts:
            s = int(stages or size)
            if size % s:
                once(
                    stages_field,
                    f"{s} pipeline stages do not divide the trial's set of {size} devices "
                    f"({size_field}); give a divisor of it",
                )
                continue
            if not builtin:
                continue  # a user objective cuts its own batches
            pipes = size // s
            if "1f1b" in schedules and min(micros) < s:
                once(
                    micro_field,
                    f"the 1f1b schedule needs at least as many micro-batches as stages "
                    f"({min(micros)} < {s}); use more micro-batches or the gpipe schedule",
                )
            for batch in batches:
                total = int(batch) * (pipes if per_rank else 1)  # per pipeline when per rank
                for m in micros:
                    if total % pipes or (total // pipes) % int(m):
                        once(
                            micro_field,
                            f"{m} micro-batches do not divide the batch of each pipeline "
                            f"({batch_field} {total} over {pipes} pipeline(s) of {s} stages "
                            f"on {size} devices)",
                        )


#: Options of the ``pareto`` pruner (see :class:`hpsearch.search.pareto.ParetoPruner`).
PARETO_PRUNER_OPTIONS: tuple[str, ...] = (
    "min_resource",
    "reduction_factor",
    "max_resource",
    "n_startup_trials",
)
#: Pruners a study with several objectives may use.
MULTI_OBJECTIVE_PRUNERS: tuple[str, ...] = ("pareto", "none")
#: Samplers that cannot sample for several objectives.
_SINGLE_OBJECTIVE_SAMPLERS: tuple[str, ...] = ("cmaes",)


def _check_objectives(raw: Any, strategies: Mapping[str, Any], problems: _Problems) -> None:
    """One form of objective (metric/direction or metrics/directions), lengths that match,
    and a sampler and pruner that fit the number of objectives."""
    if not isinstance(raw, Mapping):
        return
    metrics, directions = raw.get("metrics"), raw.get("directions")
    multi = metrics is not None
    if multi and (raw.get("metric") is not None or raw.get("direction") is not None):
        problems.add(
            "objective.metrics",
            "give either metric and direction (one objective) or metrics and directions "
            "(several), not both",
        )
    if directions is not None and not multi:
        problems.add("objective.directions", "needs objective.metrics (one direction each)")
    if (
        isinstance(metrics, list)
        and isinstance(directions, list)
        and len(metrics) >= 2
        and len(metrics) != len(directions)
    ):
        problems.add(
            "objective.directions",
            f"{len(directions)} direction{'s' if len(directions) != 1 else ''} for "
            f"{len(metrics)} metrics; give one per metric, in the same order",
        )
    pruner, sampler = strategies.get("pruner"), strategies.get("sampler")
    if multi and pruner is not None and pruner.name not in MULTI_OBJECTIVE_PRUNERS:
        problems.add(
            "search.pruner",
            f"the {pruner.name} pruner ranks one value; a study with several objectives "
            f"prunes with 'pareto' (by Pareto fronts) or 'none'",
        )
    if not multi and pruner is not None and pruner.name == "pareto":
        problems.add(
            "search.pruner", "the pareto pruner needs several objectives (objective.metrics)"
        )
    if multi and sampler is not None and sampler.name in _SINGLE_OBJECTIVE_SAMPLERS:
        problems.add(
            "search.sampler",
            f"the {sampler.name} sampler optimizes one objective; with several use nsga2, "
            "tpe, gp, random, qmc or grid",
        )
    if pruner is not None and pruner.name == "pareto":
        for option, value in pruner.options.items():
            least = 2 if option == "reduction_factor" else 0 if option == "n_startup_trials" else 1
            if option in PARETO_PRUNER_OPTIONS and (
                isinstance(value, bool) or not isinstance(value, int) or value < least
            ):
                problems.add(
                    f"search.pruner.{option}", f"expected an integer >= {least}, got {_show(value)}"
                )
            elif option not in PARETO_PRUNER_OPTIONS:
                problems.add(
                    f"search.pruner.{option}",
                    f"unknown option for the pareto pruner"
                    f"{_did_you_mean(option, PARETO_PRUNER_OPTIONS)} "
                    f"{_allowed(PARETO_PRUNER_OPTIONS)}",
                )


def _check_objective_metrics(
    raw: Mapping[str, Any], reported: Sequence[str] | None, problems: _Problems
) -> None:
    """Every metric and constraint names a metric the objective reports: for a built-in
    model one of ``reported``, for a user objective one of its own metrics."""
    metrics = raw.get("metrics")
    own = list(metrics) if isinstance(metrics, list) else [raw.get("metric") or "value"]
    if reported is not None and isinstance(metrics, list):
        for name in metrics:
            if isinstance(name, str) and name not in reported:
                problems.add(
                    "objective.metrics",
                    f"model {raw.get('model')!r} does not report {name!r} on this data set "
                    f"(it reports: {', '.join(reported)})",
                )
    constraints = raw.get("constraints")
    if isinstance(constraints, Mapping):
        allowed = list(reported) if reported is not None else own
        for name in constraints:
            if name not in allowed:
                problems.add(
                    f"objective.constraints.{name}",
                    f"not a metric the objective reports {_allowed(allowed)}",
                )


def _check_scheduler(
    raw_search: Any, search: Any, objective: Any, problems: _Problems, space: Any = None
) -> None:
    """A scheduler replaces the pruner, and needs checkpoints and rungs below the epochs."""
    if search is None or search.scheduler == "none":
        return
    name = search.scheduler
    if search.pruner.name != "none" and isinstance(raw_search, Mapping) and "pruner" in raw_search:
        problems.add(
            "search.pruner",
            f"search.scheduler {name} decides which trials stop; set pruner: none "
            "(or scheduler: none to let the pruner decide)",
        )
    if name == "pbt":
        _check_pbt(search, objective, problems, space)
    if objective is None:
        return
    if objective.checkpoint_interval is None and ":" not in objective.model:
        problems.add(
            "objective.checkpoint_interval",
            f"search.scheduler {name} pauses and copies trials through their checkpoints; "
            "null writes none (use 0 or a number of seconds)",
        )
    epochs = objective.epochs
    if name == "asha" and search.asha.min_epochs >= epochs:
        problems.add(
            "search.asha.min_epochs",
            f"must be below objective.epochs ({epochs}) for a trial to pause at a rung, "
            f"got {search.asha.min_epochs}",
        )
    if name == "pbt" and search.pbt.interval_epochs >= epochs:
        problems.add(
            "search.pbt.interval_epochs",
            f"must be below objective.epochs ({epochs}) for the population to exploit, "
            f"got {search.pbt.interval_epochs}",
        )


def _check_pbt(search: Any, objective: Any, problems: _Problems, space: Any) -> None:
    """The budget holds the population; one metric ranks it; mutated names are searched."""
    pbt = search.pbt
    if search.n_trials < pbt.population:
        problems.add(
            "search.n_trials",
            f"counts every trial of a pbt study, the population's first {pbt.population} and "
            f"their continuations; must be >= search.pbt.population, got {search.n_trials}",
        )
    if objective is not None and objective.metrics is not None:
        problems.add(
            "search.scheduler",
            "pbt ranks the population by one metric; objective.metrics lists several "
            "(use objective.metric, or scheduler: none)",
        )
    if pbt.mutate is not None and space is not None:
        for key in pbt.mutate:
            if key not in space:
                problems.add(
                    "search.pbt.mutate",
                    f"{key!r} is not a searched parameter {_allowed(list(space))}",
                )
