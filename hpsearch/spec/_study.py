"""The whole study: :class:`StudySpec`, read from YAML or a mapping, validated section by
section with every problem collected before one :class:`~hpsearch.exceptions.SpecError`."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationInfo, model_validator

from hpsearch import data as _catalog
from hpsearch.exceptions import SpecError
from hpsearch.spec._cluster import ClusterSpec, MetricsSpec
from hpsearch.spec._collect import _collect
from hpsearch.spec._messages import _fields, _Problems, _Spec
from hpsearch.spec._overrides import _apply_overrides
from hpsearch.spec._params import ParamSpec
from hpsearch.spec._search import SearchSpec
from hpsearch.spec._sections import (
    USER_OBJECTIVE_METRIC,
    Direction,
    ObjectiveSpec,
    ParallelSpec,
    Strategy,
    TrackingSpec,
    default_direction,
)
from hpsearch.spec._share import ShareSpec
from hpsearch.spec._simulated import SURROGATE_MODELS

_NO_FILE = "<study>"
PARALLEL_PREFIX = "parallel."  # space keys that search the layout: parallel.strategy, ...


class StudySpec(_Spec):
    """A validated study: objective, search space, search settings, cluster and tracking.

    Build it with :meth:`from_yaml` or :meth:`from_dict`; constructing it directly validates the
    same way (problems are shown for the file ``<study>``).

    Example:
        >>> spec = StudySpec.from_dict({
        ...     "name": "demo",
        ...     "objective": {"model": "cnn", "metric": "val_loss"},
        ...     "space": {"optimizer": {"type": "categorical", "choices": ["adam", "sgd"]}},
        ...     "search": {"sampler": {"name": "tpe", "n_startup_trials": 5}, "timeout": "30m"},
        ... })
        >>> spec.direction.value, spec.search.timeout, spec.to_dict()["search"]["sampler"]
        ('minimize', 1800.0, {'name': 'tpe', 'n_startup_trials': 5})
    """

    name: str = Field(description="Study name: letters, digits, '-', '_', '.'. Required.")
    objective: ObjectiveSpec = Field(description="What a trial trains and reports. Required.")
    space: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description=(
            "Searched hyperparameters by name. Default {} (allowed only for a user objective)."
        ),
    )
    search: SearchSpec = Field(
        default_factory=SearchSpec, description="Search settings. Defaults as in SearchSpec."
    )
    share: ShareSpec = Field(
        default_factory=ShareSpec,
        description="The study's share of a pool that several studies use. Default weight 1.",
    )
    cluster: ClusterSpec = Field(
        default_factory=ClusterSpec, description="Cluster settings. Defaults: all auto/null."
    )
    tracking: TrackingSpec = Field(
        default_factory=TrackingSpec, description="MLflow settings. Defaults: all null."
    )
    storage: str | None = Field(
        default=None,
        description="Optuna storage URL. Default null: a journal file under the run folder.",
    )
    source: Path | None = Field(
        default=None,
        exclude=True,
        description="The file the spec was read from; not part of to_dict().",
    )

    @model_validator(mode="before")
    @classmethod
    def _validate_all(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, StudySpec):
            return data
        context = info.context or {}
        source = data.get("source") if isinstance(data, Mapping) else None
        source = Path(source) if source is not None else None
        label = context.get("label") or (str(source) if source is not None else _NO_FILE)
        if isinstance(data, Mapping):
            data = {k: v for k, v in data.items() if k != "source"}
        return _collect(data, label, source, known=_fields(StudySpec))

    # ---------------------------------------------------------------------------- loading

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], *, overrides: Mapping[str, Any] | None = None
    ) -> StudySpec:
        """Read and validate a study file.

        Args:
            path: The study file; messages show it as given.
            overrides: Dotted keys or short aliases (see OVERRIDE_ALIASES) to set; None values
                are skipped.

        Raises:
            SpecError: The file is missing, is not valid YAML, or has invalid content; every
                problem is one line.
        """
        label = os.fspath(path)
        file = Path(path)
        if not file.is_file():
            raise SpecError(f"{label}: {'not a file' if file.exists() else 'no such file'}")
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark is not None else label
            raise SpecError(f"{where}: invalid YAML: {exc.problem}") from None
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"{label}: cannot read the study file: {exc}") from None
        if data is None:
            raise SpecError(f"{label}: the study file is empty")
        return cls._build(data, source=file, label=label, overrides=overrides)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        source: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> StudySpec:
        """Validate study data in file form (as :meth:`to_dict` returns it).

        Args:
            data: The mapping.
            source: The file it came from, if any: shown in messages, and its folder is searched
                for a user objective. Without it messages show ``<study>``.
            overrides: As for :meth:`from_yaml`.

        Raises:
            SpecError: Every problem, one line each.
        """
        file = Path(source) if source is not None else None
        label = os.fspath(source) if source is not None else _NO_FILE
        return cls._build(data, source=file, label=label, overrides=overrides)

    @classmethod
    def _build(
        cls, data: Any, *, source: Path | None, label: str, overrides: Mapping[str, Any] | None
    ) -> StudySpec:
        problems = _Problems(label)
        if isinstance(data, Mapping):
            data = copy.deepcopy(dict(data))
            if overrides:
                _apply_overrides(data, overrides, problems, cls)
        try:
            payload = {**data, "source": source} if isinstance(data, dict) else data
            spec = cls.model_validate(payload, context={"label": label})
        except SpecError as exc:
            raise SpecError(problems.lines + exc.problems) from None
        if problems.lines:
            raise SpecError(problems.lines)
        return spec

    def replace(self, **overrides: Any) -> StudySpec:
        """A re-validated copy with overrides applied (same keys as ``overrides=``).

        Dotted keys need dict unpacking: ``spec.replace(**{"search.n_trials": 3})``.

        Example:
            >>> spec = StudySpec.from_dict({"name": "a", "objective": {"model": "cnn"},
            ...     "space": {"x": {"type": "int", "low": 1, "high": 3}}})
            >>> spec.replace(n_trials=3, epochs=2).search.n_trials
            3
        """
        return type(self)._build(
            self.to_dict(),
            source=self.source,
            label=str(self.source) if self.source is not None else _NO_FILE,
            overrides=overrides,
        )

    # ---------------------------------------------------------------------------- output

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-able data in file form.

        Metric and direction are written resolved, so the dict (and :attr:`spec_hash`) records
        what the study really optimizes; samplers and pruners without options are written as
        their name, and the parallel layout as its strategy (not at all for ddp).
        """
        data = self.model_dump(mode="json")
        if self.is_multi_objective:
            data["objective"]["metrics"] = list(self.metrics)
            data["objective"]["directions"] = [d.value for d in self.directions]
            data["objective"].pop("metric")
            data["objective"].pop("direction")
        else:
            data["objective"]["metric"] = self.metric
            data["objective"]["direction"] = self.direction.value
            data["objective"].pop("metrics")
            data["objective"].pop("directions")
        if data["objective"]["constraints"] is None:
            data["objective"].pop("constraints")  # the spec_hash stays as it was
        parallel = data["objective"].pop("parallel")
        default = ParallelSpec(strategy=self.objective.parallel.strategy).model_dump(mode="json")
        # The layout in full where it says more than its strategy; ddp, the default, is left
        # out, so that the spec_hash of a study written before layouts existed is kept.
        if parallel != default:
            data["objective"]["parallel"] = parallel
        elif self.objective.parallel.strategy is not Strategy.DDP:
            data["objective"]["parallel"] = parallel["strategy"]
        if data["objective"].get("max_memory_per_device") is None:
            data["objective"].pop("max_memory_per_device", None)  # the spec_hash stays as it was
        # The scheduler and its options only where one is used: the spec_hash of a study
        # written before schedulers existed is kept.
        scheduler = data["search"]["scheduler"]
        for key in ("asha", "pbt"):
            if key != scheduler:
                data["search"].pop(key)
        if scheduler == "none":
            data["search"].pop("scheduler")
        starts = [{"from": w.pop("from_"), **w} for w in data["search"].pop("warm_start")]
        if starts:  # none: the spec_hash stays as it was
            data["search"]["warm_start"] = starts
        if data["share"] == ShareSpec().model_dump(mode="json"):
            data.pop("share")  # a study's share of a pool is said only where it is not 1
        if data["cluster"].get("simulated") is None:
            data["cluster"].pop("simulated")  # the spec_hash stays as it was
        if data["cluster"].get("metrics") == MetricsSpec().model_dump(mode="json"):
            # Where the study is watched from is not what it is: the spec_hash stays as it was.
            data["cluster"].pop("metrics")
        for key in ("sampler", "pruner"):
            strategy = data["search"][key]
            data["search"][key] = (
                {"name": strategy["name"], **strategy["options"]}
                if strategy["options"]
                else strategy["name"]
            )
        return data

    def to_yaml(self) -> str:
        """The spec as a study file (the text of :meth:`to_dict`)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @property
    def spec_hash(self) -> str:
        """First 12 hex digits of the SHA-256 of the canonical JSON of :meth:`to_dict`."""
        data = self.to_dict()
        # Hashed under the cluster key's former name, so that renaming it changed no hash.
        data["cluster"]["scheduler"] = data["cluster"].pop("address")
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def is_user_objective(self) -> bool:
        """Whether ``objective.model`` is a ``package.module:function`` reference."""
        return ":" in self.objective.model

    @property
    def trial_size(self) -> int:
        """Devices (GPUs, or CPU slots) one trial uses: ``objective.gpus_per_trial``.

        When ``gpus_per_trial`` is searched, each trial's own size comes from its parameters;
        this is then the size of a trial that does not say.
        """
        return max(1, int(self.objective.gpus_per_trial or 1))

    @property
    def trial_devices(self) -> float:
        """Devices one trial holds: ``objective.gpus_per_trial``, a fraction of one device
        (1/2, 1/4, 1/8) where trials are packed several to a device (its :attr:`trial_size`,
        the processes it runs, is then 1)."""
        return float(self.objective.gpus_per_trial or 1)

    @property
    def packed(self) -> int:
        """Trials that share one device: 1, or 2, 4, 8 for a fractional ``gpus_per_trial``."""
        return max(1, round(1 / self.trial_devices))

    def parallel_for(self, params: Mapping[str, Any]) -> ParallelSpec:
        """The parallel layout of a trial with ``params``: ``objective.parallel``, with the
        parts the space searches (``parallel.strategy``, ``parallel.stages``, ...) taken from
        the trial's parameters.

        Example:
            >>> spec = StudySpec.model_validate({"name": "s", "objective": {"model": "cnn"},
            ...     "space": {"parallel.strategy": {"type": "categorical",
            ...                                     "choices": ["ddp", "fsdp"]}}})
            >>> spec.parallel_for({"parallel.strategy": "fsdp"}).strategy.value
            'fsdp'
        """
        searched = {
            key.removeprefix(PARALLEL_PREFIX): value
            for key, value in params.items()
            if key.startswith(PARALLEL_PREFIX)
        }
        if not searched:
            return self.objective.parallel
        return ParallelSpec.model_validate({**self.objective.parallel.model_dump(), **searched})

    @property
    def is_multi_objective(self) -> bool:
        """Whether the study optimizes several metrics (``objective.metrics``)."""
        return self.objective.metrics is not None

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every optimized metric, in order (one for a single-objective study)."""
        if self.objective.metrics is not None:
            return tuple(self.objective.metrics)
        return (self.metric,)

    @property
    def directions(self) -> tuple[Direction, ...]:
        """One direction per metric: as given, else derived from each metric's name."""
        if self.objective.metrics is None:
            return (self.direction,)
        given = self.objective.directions or [default_direction(m) for m in self.metrics]
        return tuple(Direction(d) for d in given)

    @property
    def constraints(self) -> dict[str, dict[str, float]]:
        """``objective.constraints``: bounds by metric (``{}`` when none)."""
        return dict(self.objective.constraints or {})

    @property
    def metric(self) -> str:
        """The optimized metric: as given, else the model's default (the first of
        ``metrics`` in a multi-objective study)."""
        if self.objective.metrics is not None:
            return self.objective.metrics[0]
        if self.objective.metric is not None:
            return self.objective.metric
        if self.is_user_objective:
            return USER_OBJECTIVE_METRIC
        if self.objective.model in SURROGATE_MODELS:
            return "val_accuracy"  # the benchmarks' (hpsearch.simulation)
        return _catalog.default_metric(self.objective.model, self.objective.dataset)

    @property
    def direction(self) -> Direction:
        """The optimization direction: as given, else derived from the metric name (the
        first of ``directions`` in a multi-objective study)."""
        if self.objective.metrics is not None:
            return self.directions[0]
        return self.objective.direction or default_direction(self.metric)
