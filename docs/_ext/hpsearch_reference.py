"""Reference pages generated from hpsearch's own code, so that they cannot drift from it.

Directives:

``study-keys``
    Every key of the study file, section by section, from the spec's pydantic models
    (:class:`hpsearch.spec.StudySpec` and the models of its fields): type, default, allowed
    values and description.
``tracking-names``
    The MLflow tags and Optuna user attributes hpsearch writes (``hpsearch.tracking`` TABLE).
``prometheus-series``
    The series of a study's endpoint (``hpsearch.metrics.SERIES``) and of a pool's scheduler
    (``hpsearch.cluster.pool``'s SERIES).
``package-layers``
    The layers of the package from pyproject.toml's import-linter contract, with what each
    room owns (``LAYERS_OWN`` below; tests/test_docs.py checks both name the same rooms).
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from pathlib import Path
from typing import Any

import tomllib
from docutils import nodes
from docutils.statemachine import StringList
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ the study file


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """The bare type of an annotation and its metadata (validators)."""
    meta: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, meta = args[0], [*meta, *args[1:]]
    return annotation, meta


def _type_name(annotation: Any) -> str:
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (list, tuple):
        inner = {_type_name(a) for a in typing.get_args(annotation) if a is not Ellipsis}
        return f"list of {' | '.join(sorted(inner))}" if inner else "list"
    if origin is dict:
        return "mapping"
    if annotation is type(None):
        return "null"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "mapping"
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return "string"
    names = {int: "integer", float: "number", str: "string", bool: "boolean", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _allowed(annotation: Any, metadata: list[Any]) -> list[str]:
    """Allowed values: an enum's, a Literal's strings, or those a ``_choice`` check names."""
    annotation, meta = _strip(annotation)
    for validator in [*metadata, *meta]:
        func = getattr(validator, "func", None)
        if func is not None and func.__closure__:
            free = inspect.getclosurevars(func).nonlocals
            if isinstance(free.get("allowed"), list | tuple):
                return [str(a) for a in free["allowed"]]
            inner = free.get("check") or free.get("inner")
            if callable(inner) and getattr(inner, "__closure__", None):
                nested = inspect.getclosurevars(inner).nonlocals
                if isinstance(nested.get("allowed"), list | tuple):
                    return [str(a) for a in nested["allowed"]]
    out: list[str] = []
    for arg in typing.get_args(annotation) or (annotation,):
        arg, _ = _strip(arg)
        if inspect.isclass(arg) and issubclass(arg, enum.Enum):
            out += [str(m.value) for m in arg]
        elif typing.get_origin(arg) is typing.Literal:
            out += [str(a) for a in typing.get_args(arg)]
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    annotation, _ = _strip(annotation)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is PydanticUndefined and field.default_factory is not None:
        value = field.default_factory()
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    try:
        return f"``{json.dumps(value)}``"
    except TypeError:
        return f"``{value!s}``"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or " "


def _extra_allowed() -> dict[str, list[str]]:
    """Names validated apart from the model's field: samplers, pruners, schedulers, models."""
    from hpsearch import spec
    from hpsearch.spec._simulated import SURROGATE_MODELS

    return {
        "objective.model": [*spec.BUILTIN_MODELS, *SURROGATE_MODELS, "package.module:function"],
        "objective.dataset": [*spec.BUILTIN_DATASETS, "{path: FILE}", "package.module:function"],
        "search.sampler": sorted(spec.SAMPLER_CLASSES),
        "search.pruner": sorted(spec.PRUNER_CLASSES),
    }


def study_key_sections() -> list[tuple[str, type[BaseModel]]]:
    """(dotted path, model) for the study file and every nested section, in file order."""
    from hpsearch.spec import CategoricalParam, FloatParam, IntParam, StudySpec

    out: list[tuple[str, type[BaseModel]]] = []

    def walk(path: str, model: type[BaseModel]) -> None:
        if any(m is model for _, m in out):
            return
        out.append((path, model))
        for name, field in model.model_fields.items():
            key = field.alias or name
            for inner in _models_in(field.annotation):
                if inner in (FloatParam, IntParam, CategoricalParam):
                    continue
                walk(f"{path}.{key}" if path else key, inner)

    walk("", StudySpec)
    for param in (FloatParam, IntParam, CategoricalParam):
        out.append((f"space.NAME ({param.model_fields['type'].annotation.__args__[0]})", param))
    return out


def study_key_rows(path: str, model: type[BaseModel]) -> list[tuple[str, str, str, str, str]]:
    extra = _extra_allowed()
    rows = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = field.alias or name
        dotted = f"{path}.{key}" if path else key
        allowed = extra.get(dotted) or _allowed(field.annotation, field.metadata)
        rows.append(
            (
                f"``{key}``",
                _cell(_type_name(field.annotation)),
                _default(field),
                _cell(", ".join(f"``{a}``" for a in allowed)),
                _cell(field.description or ""),
            )
        )
    return rows


def _list_table(header: tuple[str, ...], rows: list[tuple[str, ...]], widths: str) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return [*lines, ""]


class _Generated(SphinxDirective):
    """A directive whose page text is made from the code: each subclass says how (its
    :meth:`rst`), and this base parses what it makes into the page."""

    has_content = False

    def rst(self) -> list[str]:
        """The generated reStructuredText; every subclass provides it (this base has none)."""
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        text = StringList(self.rst(), source="(generated)")
        nested_parse_with_titles(self.state, text, container)
        return list(container.children)


class StudyKeys(_Generated):
    """Every key of the study file, one table per section."""

    def rst(self) -> list[str]:
        lines: list[str] = []
        for path, model in study_key_sections():
            title = f"``{path}``" if path else "The top level"
            doc = inspect.getdoc(model) or ""
            first = doc.split("\n\n")[0].replace("\n", " ")
            lines += [title, "-" * (len(title) + 4), ""]
            if first and not first.startswith(">>>"):
                lines += [first, ""]
            header = ("key", "type", "default", "allowed", "description")
            lines += _list_table(header, study_key_rows(path, model), "14 14 12 18 42")
        return lines


# ------------------------------------------------------------------ tracking and metrics


class TrackingNames(_Generated):
    def rst(self) -> list[str]:
        from hpsearch.tracking import tag

        rows = [(f"``{name}``", where, _cell(what)) for name, where, what in tag.TAGS_TABLE]
        return _list_table(("name", "where", "what"), rows, "25 20 55")


class PrometheusSeries(_Generated):
    option_spec: typing.ClassVar = {"source": lambda text: text.strip()}

    def rst(self) -> list[str]:
        if self.options.get("source") == "pool":
            from hpsearch.cluster.pool import _metrics as pool_metrics

            rows = [
                (f"``{name}``", kind, _cell(", ".join(f"``{x}``" for x in labels)), _cell(text))
                for name, (kind, text, labels) in pool_metrics.SERIES.items()
            ]
        else:
            from hpsearch.metrics import HELP, SERIES

            rows = [
                (f"``{name}``", kind, _cell(", ".join(f"``{x}``" for x in labels)), HELP[key])
                for name, kind, labels, key in SERIES
            ]
        return _list_table(("series", "type", "labels", "what"), rows, "30 10 20 40")


# ------------------------------------------------------------------ the layers

#: What each room of the package owns; the rows follow pyproject.toml's layers contract.
LAYERS_OWN = {
    "cli": "the commands, the live display, exit codes",
    "testing": "the shipped test kit",
    "preload": "the name Dask's ``--preload`` is given",
    "study": "the Python API: ``Study``, its one run path (checked once, then a backend: "
    "Dask or simulated, then the end), the result, reading a study back",
    "simulation": "the simulated cluster: virtual clock, simulated workers, the grid of methods",
    "coordinator": "ask / submit / tell, placement, scheduling, losses, pool share, "
    "interruption, progress",
    "worker": "what a Dask worker runs: the trial runner, rank processes, preload, warm-up",
    "metrics": "Prometheus series and endpoint",
    "training": "how a built-in trial trains (loop, amp, ddp / fsdp / pipeline, memory, the "
    "built-in objective)",
    "cluster": "backends, devices, GPU sets, the pool's arbiter",
    "models": "the model families",
    "trial": "the trial contract: task, outcome, context, checkpoints and their layout, "
    "stopping and pausing, fault points",
    "search": "the Optuna side: space, sampler, pruner, best trial, carried edits, warm start "
    "(a run's start plan), the private-Optuna quarantine; ``pareto/``, ``schedulers/``",
    "tracking": "MLflow: the study run, trial runs, tags, the writer and its backlog",
    "spec": "the study file: models, defaults, checks, one-line errors, edits and their kinds",
    "data": "built-in data sets, user files, the surrogate benchmarks",
    "storage": "Optuna storages: opening them, serving them to the workers",
    "_imports": "user imports and lazy names",
    "_process": "process life",
    "_plotting": "plot colours",
    "exceptions": "the error tree",
}


def contract_layers() -> list[list[str]]:
    """The rows of pyproject.toml's layers contract, top first, each a list of rooms."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[part.strip() for part in row.split("|")] for row in layers["layers"]]


class PackageLayers(_Generated):
    def rst(self) -> list[str]:
        rows = []
        for row in contract_layers():
            rooms = " \\| ".join(f"``{room}``" for room in row)
            owns = "; ".join(LAYERS_OWN.get(room, "**not described**") for room in row)
            rows.append((rooms, _cell(owns)))
        return _list_table(("layer", "what its rooms own"), rows, "30 70")


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("study-keys", StudyKeys)
    app.add_directive("tracking-names", TrackingNames)
    app.add_directive("prometheus-series", PrometheusSeries)
    app.add_directive("package-layers", PackageLayers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
