"""Tests of the study spec: loading, defaults, validation messages, overrides, user objectives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpsearch.exceptions import (
    ClusterError,
    GpuAllocationError,
    HpsearchError,
    SpecError,
    TrackingError,
    TrialError,
)
from hpsearch.spec import (
    BUILTIN_DATASETS,
    BUILTIN_MODELS,
    Direction,
    FloatParam,
    IntParam,
    ObjectiveSpec,
    Precision,
    SamplerSpec,
    StudySpec,
    default_direction,
    load_user_objective,
    parse_duration,
)

QUICKSTART = """\
name: quickstart
objective:
  model: cnn
  dataset: digits
  metric: val_accuracy
  direction: maximize
  epochs: 8
  precision: auto
  gpus_per_trial: 1
  params: {batch_size: 64}
  trial_timeout: null
  checkpoint_interval: 5.0
space:
  lr: {type: float, low: 1.0e-4, high: 3.0e-2, log: true}
  channels: {type: int, low: 8, high: 64, step: 8}
  dropout: {type: float, low: 0.0, high: 0.5}
  optimizer: {type: categorical, choices: [adam, sgd]}
search:
  n_trials: 16
  timeout: null
  sampler: tpe
  pruner: hyperband
  seed: 0
  max_concurrent: auto
  max_retries: 2
cluster:
  address: null
  n_workers: auto
  gpus: auto
  slots: auto
  backend: local
  slurm: null
  kubernetes: null
  adapt: null
  storage_access: proxy
  tls: null
tracking:
  mlflow_uri: null
  experiment: null
storage: null
"""


def minimal(**sections: Any) -> dict[str, Any]:
    """A small valid study in file form, with sections replaced or added."""
    data: dict[str, Any] = {
        "name": "t",
        "objective": {"model": "cnn"},
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
    }
    data.update(sections)
    return data


def problems_of(data: Any, **kwargs: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(data, **kwargs)
    return info.value.problems


def one_problem(data: Any, **kwargs: Any) -> str:
    problems = problems_of(data, **kwargs)
    assert len(problems) == 1, problems
    return problems[0]


# ------------------------------------------------------------------------------ good files


def test_quickstart_file_loads_with_every_value(tmp_path: Path) -> None:
    path = tmp_path / "quickstart.yaml"
    path.write_text(QUICKSTART)
    spec = StudySpec.from_yaml(path)
    assert spec.name == "quickstart"
    assert spec.source == path
    assert spec.objective.epochs == 8
    assert spec.objective.precision is Precision.AUTO
    assert spec.objective.params == {"batch_size": 64}
    assert spec.space["lr"] == FloatParam(type="float", low=1e-4, high=3e-2, log=True)
    assert spec.space["channels"] == IntParam(type="int", low=8, high=64, step=8)
    assert spec.search.sampler == SamplerSpec(name="tpe")
    assert spec.search.pruner.name == "hyperband"
    assert spec.metric == "val_accuracy"
    assert spec.direction is Direction.MAXIMIZE
    assert not spec.is_user_objective


def test_round_trip_through_dict_and_yaml(tmp_path: Path) -> None:
    path = tmp_path / "quickstart.yaml"
    path.write_text(QUICKSTART)
    spec = StudySpec.from_yaml(path)
    data = spec.to_dict()
    assert "source" not in data
    expected = yaml.safe_load(QUICKSTART)
    # The file states every key except the param defaults, which to_dict() writes out.
    assert {**data, "space": None} == {**expected, "space": None}
    assert data["space"]["lr"] == {**expected["space"]["lr"], "step": None}
    assert data["space"]["channels"] == {**expected["space"]["channels"], "log": False}
    again = StudySpec.from_dict(data)
    assert again.to_dict() == data
    assert again.spec_hash == spec.spec_hash
    (tmp_path / "again.yaml").write_text(spec.to_yaml())
    assert StudySpec.from_yaml(tmp_path / "again.yaml").to_dict() == data


def test_defaults_are_filled_in() -> None:
    spec = StudySpec.from_dict(minimal())
    assert spec.objective.dataset == "digits"
    assert spec.objective.epochs == 10
    assert spec.objective.gpus_per_trial == 1
    assert spec.objective.precision is Precision.AUTO
    assert spec.objective.params == {}
    assert spec.search.n_trials == 20
    assert spec.search.timeout is None
    assert spec.search.sampler.name == "tpe"
    assert spec.search.pruner.name == "median"
    assert spec.search.seed == 0
    assert spec.search.max_concurrent == "auto"
    assert spec.search.max_retries == 2
    assert (spec.cluster.address, spec.cluster.n_workers, spec.cluster.gpus) == (
        None,
        "auto",
        "auto",
    )
    assert (spec.tracking.mlflow_uri, spec.tracking.experiment, spec.storage) == (None, None, None)
    assert spec.source is None
    assert spec.metric == "val_accuracy"
    assert spec.direction is Direction.MAXIMIZE
    # Resolved metric and direction are written out, so the record says what was optimized.
    assert spec.to_dict()["objective"]["metric"] == "val_accuracy"
    assert spec.to_dict()["objective"]["direction"] == "maximize"


@pytest.mark.parametrize(
    ("metric", "direction"),
    [
        ("val_loss", Direction.MINIMIZE),
        ("perplexity", Direction.MINIMIZE),
        ("test_error", Direction.MINIMIZE),
        ("val_mmd", Direction.MINIMIZE),
        ("val_accuracy", Direction.MAXIMIZE),
        ("f1", Direction.MAXIMIZE),
    ],
)
def test_direction_follows_the_metric_name(metric: str, direction: Direction) -> None:
    assert default_direction(metric) is direction


def test_explicit_direction_wins() -> None:
    spec = StudySpec.from_dict(
        minimal(objective={"model": "cnn", "metric": "val_loss", "direction": "MAXIMIZE"})
    )
    assert spec.direction is Direction.MAXIMIZE


def test_sampler_and_pruner_mappings_are_normalised() -> None:
    spec = StudySpec.from_dict(
        minimal(
            search={
                "sampler": {"name": "TPE", "n_startup_trials": 5},
                "pruner": {"name": "Median", "n_warmup_steps": 3},
            }
        )
    )
    assert spec.search.sampler == SamplerSpec(name="tpe", options={"n_startup_trials": 5})
    assert spec.search.pruner.options == {"n_warmup_steps": 3}
    assert spec.to_dict()["search"]["sampler"] == {"name": "tpe", "n_startup_trials": 5}
    assert spec.to_dict()["search"]["pruner"] == {"name": "median", "n_warmup_steps": 3}
    assert StudySpec.from_dict(spec.to_dict()).search == spec.search


def test_spec_hash_is_stable_and_sensitive() -> None:
    spec = StudySpec.from_dict(minimal())
    assert len(spec.spec_hash) == 12
    assert int(spec.spec_hash, 16) >= 0
    assert StudySpec.from_dict(minimal()).spec_hash == spec.spec_hash
    assert spec.replace(n_trials=3).spec_hash != spec.spec_hash


def test_direct_construction_validates_like_from_dict() -> None:
    spec = StudySpec(
        name="direct",
        objective=ObjectiveSpec(model="cnn"),
        space={"x": IntParam(type="int", low=1, high=3)},
    )
    assert spec.search.sampler.name == "tpe"
    with pytest.raises(SpecError) as info:
        StudySpec(name="bad name", objective=ObjectiveSpec(model="cnn"), space={})
    assert info.value.problems[0].startswith("<study>: name: ")


def test_module_constants() -> None:
    assert BUILTIN_MODELS == ("cnn", "rnn", "lstm", "gan", "transformer")
    assert BUILTIN_DATASETS == ("digits", "digits-seq", "python-docs", "docs-or-code")


# ------------------------------------------------------------------------------ file errors


def test_missing_file_uses_the_path_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml("studies/nope.yaml")
    assert str(info.value) == "studies/nope.yaml: no such file"


def test_invalid_yaml_shows_line_and_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "x.yaml").write_text("name: x\nobjective:\n  model: cnn: x\n")
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml("studies/x.yaml")
    assert str(info.value).startswith("studies/x.yaml:3:13: invalid YAML: ")
    assert "mapping values are not allowed here" in str(info.value)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml(path)
    assert str(info.value) == f"{path}: the study file must be a mapping of keys, got a list"


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("# nothing\n")
    with pytest.raises(SpecError, match="the study file is empty"):
        StudySpec.from_yaml(path)


def test_content_errors_name_the_file_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "x.yaml").write_text(
        "name: x\nobjective: {model: cnn, gpus_per_trial: 0}\n"
        "space: {lr: {type: float, low: 0.1, high: 1}}\n"
    )
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml("studies/x.yaml")
    assert str(info.value) == (
        "studies/x.yaml: objective.gpus_per_trial: must be >= 1 or a fraction of one device "
        "(1/2, 1/4, 1/8), got 0"
    )


# ------------------------------------------------------------------------------ bad values


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "my study"}, "name", ["letters, digits", "'my study'"]),
        ({"name": None}, "name", ["required"]),
        (
            {"objective": {"model": "cnn", "epochs": "abc"}},
            "objective.epochs",
            ["expected an integer, got 'abc'"],
        ),
        (
            {"objective": {"model": "cnn", "epochs": True}},
            "objective.epochs",
            ["expected an integer, got True"],
        ),
        ({"objective": {"model": "cnn", "epochs": 0}}, "objective.epochs", ["must be >= 1, got 0"]),
        (
            {"objective": {"model": "cnn", "gpus_per_trial": 0}},
            "objective.gpus_per_trial",
            ["must be >= 1 or a fraction of one device (1/2, 1/4, 1/8), got 0"],
        ),
        (
            {"objective": {"model": "cnnn"}},
            "objective.model",
            [
                "unknown model 'cnnn'",
                "did you mean 'cnn'?",
                "cnn, rnn, lstm, gan",
                "package.module:function",
            ],
        ),
        ({"objective": {"model": "pkg.mod:"}}, "objective.model", ["package.module:function"]),
        (
            {"objective": {"model": "cnn", "dataset": "digitz"}},
            "objective.dataset",
            ["unknown dataset 'digitz'", "did you mean 'digits'?", "digits, digits-seq"],
        ),
        (
            {"objective": {"model": "cnn", "dataset": 3}},
            "objective.dataset",
            ["expected a data set name or a mapping, got 3"],
        ),
        (
            {"objective": {"model": "cnn", "precision": "bf61"}},
            "objective.precision",
            ["unknown precision 'bf61'", "did you mean 'bf16'?", "fp32, bf16, fp16, auto"],
        ),
        (
            {"objective": {"model": "cnn", "direction": "maximise"}},
            "objective.direction",
            ["unknown direction 'maximise'", "did you mean 'maximize'?", "maximize, minimize"],
        ),
        (
            {"objective": {"model": "cnn", "metric": 3}},
            "objective.metric",
            ["expected a string, got 3"],
        ),
        (
            {"objective": {"model": "cnn", "params": [1]}},
            "objective.params",
            ["expected a mapping of fixed hyperparameters"],
        ),
        (
            {"objective": {"model": "cnn", "params": {"f": {1, 2}}}},
            "objective.params",
            ["f: expected a scalar, list or mapping"],
        ),
        (
            {"objective": {"model": "cnn", "trial_timeout": "2 hours"}},
            "objective.trial_timeout",
            ["'90s', '30m', '2h'", "'2 hours'"],
        ),
        ({"objective": "cnn"}, "objective", ["expected a mapping, got 'cnn'"]),
        ({"objective": None}, "objective", ["required"]),
        (
            {"space": {"lr": {"type": "float", "low": 0.1, "high": 0.01}}},
            "space.lr",
            ["low (0.1) must be <= high (0.01)"],
        ),
        (
            {"space": {"n": {"type": "int", "low": 5, "high": 1}}},
            "space.n",
            ["low (5) must be <= high (1)"],
        ),
        (
            {"space": {"lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}},
            "space.lr",
            ["log: true needs low > 0"],
        ),
        (
            {"space": {"n": {"type": "int", "low": 0, "high": 8, "log": True}}},
            "space.n",
            ["log: true needs low >= 1"],
        ),
        (
            {"space": {"n": {"type": "int", "low": 1, "high": 8, "step": 0}}},
            "space.n.step",
            ["must be >= 1, got 0"],
        ),
        (
            {"space": {"x": {"type": "float", "low": 0, "high": 1, "step": 0}}},
            "space.x.step",
            ["must be > 0, got 0"],
        ),
        (
            {"space": {"x": {"type": "float", "low": 1, "high": 9, "step": 1, "log": True}}},
            "space.x",
            ["cannot be combined with a step"],
        ),
        (
            {"space": {"n": {"type": "int", "low": 1, "high": 9, "step": 2, "log": True}}},
            "space.n",
            ["cannot be combined with step 2"],
        ),
        (
            {"space": {"x": {"type": "float", "low": "abc", "high": 1}}},
            "space.x.low",
            ["expected a number, got 'abc'"],
        ),
        (
            {"space": {"x": {"type": "float", "low": 0, "high": 1, "log": "yes"}}},
            "space.x.log",
            ["expected true or false, got 'yes'"],
        ),
        ({"space": {"x": {"type": "float", "high": 1}}}, "space.x.low", ["required"]),
        (
            {"space": {"o": {"type": "categorical", "choices": []}}},
            "space.o.choices",
            ["at least one choice"],
        ),
        (
            {"space": {"o": {"type": "categorical", "choices": [[1, 2]]}}},
            "space.o.choices",
            ["null, booleans, integers, numbers or strings", "got a list"],
        ),
        (
            {"space": {"o": {"type": "categorical", "choices": "adam"}}},
            "space.o.choices",
            ["expected a list of choices"],
        ),
        (
            {"space": {"x": {"type": "flaot", "low": 0, "high": 1}}},
            "space.x.type",
            ["unknown type 'flaot'", "did you mean 'float'?", "float, int, categorical"],
        ),
        ({"space": {"x": {"low": 0, "high": 1}}}, "space.x.type", ["required"]),
        ({"space": {"x": 0.5}}, "space.x", ["expected a mapping such as {type: float"]),
        ({"space": {}}, "space", ["needs at least one searched hyperparameter"]),
        ({"search": {"n_trials": 0}}, "search.n_trials", ["must be >= 1, got 0"]),
        (
            {"search": {"timeout": "3 weeks"}},
            "search.timeout",
            ["'90s', '30m', '2h' or '1d'", "'3 weeks'"],
        ),
        ({"search": {"timeout": 0}}, "search.timeout", ["must be > 0 seconds"]),
        ({"search": {"seed": 1.5}}, "search.seed", ["expected an integer, got 1.5"]),
        (
            {"search": {"max_concurrent": 0}},
            "search.max_concurrent",
            ["expected 'auto' or an integer >= 1, got 0"],
        ),
        ({"search": {"max_retries": -1}}, "search.max_retries", ["must be >= 0, got -1"]),
        (
            {"search": {"sampler": "tpee"}},
            "search.sampler",
            [
                "unknown sampler 'tpee'",
                "did you mean 'tpe'?",
                "tpe, random, grid, cmaes, gp, qmc, nsga2",
            ],
        ),
        ({"search": {"sampler": 3}}, "search.sampler", ["expected a sampler name or a mapping"]),
        ({"search": {"pruner": {"name": 3}}}, "search.pruner.name", ["expected a string, got 3"]),
        (
            {"search": {"pruner": "hyperbnd"}},
            "search.pruner",
            [
                "unknown pruner 'hyperbnd'; did you mean 'hyperband'? (allowed: none, median, "
                "percentile, successive_halving, hyperband, pareto)"
            ],
        ),
        (
            {"search": {"sampler": {"name": "tpe", "n_startup_trial": 5}}},
            "search.sampler.n_startup_trial",
            ["unknown option for the tpe sampler", "did you mean 'n_startup_trials'?"],
        ),
        (
            {"search": {"sampler": {"name": "random", "seed": 1}}},
            "search.sampler.seed",
            ["set search.seed instead"],
        ),
        (
            {"search": {"sampler": {"name": "tpe", "gamma": 3}}},
            "search.sampler.gamma",
            ["Python object"],
        ),
        (
            {"search": {"pruner": {"name": "median", "n_warmup_step": 2}}},
            "search.pruner.n_warmup_step",
            ["unknown option for the median pruner", "did you mean 'n_warmup_steps'?"],
        ),
        ({"search": {"pruner": {"name": "none", "x": 1}}}, "search.pruner.x", ["takes no options"]),
        ({"search": {"sampler": "grid"}}, "space.lr", ["grid sampler", "step"]),
        (
            {"cluster": {"n_workers": "many"}},
            "cluster.n_workers",
            ["expected 'auto' or an integer >= 1, got 'many'"],
        ),
        ({"cluster": {"gpus": [0, 0]}}, "cluster.gpus", ["distinct"]),
        ({"cluster": {"gpus": [0, -1]}}, "cluster.gpus", ["non-negative", "-1"]),
        ({"cluster": {"gpus": "all"}}, "cluster.gpus", ["'auto', 'none' or a list", "'all'"]),
        ({"cluster": {"address": 8786}}, "cluster.address", ["expected a string, got 8786"]),
        ({"share": {"weight": 0}}, "share.weight", ["must be > 0, got 0"]),
        ({"share": {"priority": "urgent"}}, "share.priority", ["unknown priority", "high"]),
        ({"share": {"max_devices": 0}}, "share.max_devices", [">= 1"]),
        ({"share": {"wieght": 2}}, "share.wieght", ["did you mean 'weight'?"]),
        (
            {"cluster": {"address": "tcp://h:1", "scheduler": "tcp://h:1"}},
            "cluster.scheduler",
            ["renamed cluster.address, which is also given"],
        ),
        ({"tracking": {"mlflow_uri": 3}}, "tracking.mlflow_uri", ["expected a string, got 3"]),
        ({"storage": 3}, "storage", ["expected an Optuna storage URL, got 3"]),
    ],
)
def test_bad_value_is_one_precise_line(
    changes: dict[str, Any], field: str, words: list[str]
) -> None:
    line = one_problem(minimal(**changes))
    assert line.startswith(f"<study>: {field}: "), line
    for word in words:
        assert word in line, (word, line)


def test_share_and_the_renamed_scheduler_key() -> None:
    from hpsearch.exceptions import SpecRenamed

    spec = StudySpec.from_dict(minimal())
    assert (spec.share.weight, spec.share.priority, spec.share.max_devices) == (1, "normal", None)
    assert "share" not in spec.to_dict()  # the default is not written (nor hashed)
    shared = StudySpec.from_dict(minimal(share={"weight": 2, "priority": "HIGH", "max_devices": 3}))
    assert shared.to_dict()["share"] == {"weight": 2.0, "priority": "high", "max_devices": 3}
    assert StudySpec.from_dict(shared.to_dict()).to_dict() == shared.to_dict()
    with pytest.warns(SpecRenamed, match="cluster.scheduler is renamed cluster.address"):
        old = StudySpec.from_dict(minimal(cluster={"scheduler": "tcp://h:8786"}))
    assert old.cluster.address == "tcp://h:8786"
    assert old.to_dict()["cluster"]["address"] == "tcp://h:8786"


def test_space_key_also_in_params() -> None:
    line = one_problem(minimal(objective={"model": "cnn", "params": {"lr": 0.1, "batch_size": 64}}))
    assert line.startswith("<study>: space.lr: ")
    assert "objective.params" in line


def test_grid_accepts_finite_spaces() -> None:
    spec = StudySpec.from_dict(
        minimal(
            space={
                "x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.5},
                "n": {"type": "int", "low": 1, "high": 3},
                "o": {"type": "categorical", "choices": ["a", "b"]},
            },
            search={"sampler": "grid"},
        )
    )
    assert spec.search.sampler.name == "grid"


def test_cmaes_needs_its_package() -> None:
    data = minimal(search={"sampler": "cmaes"})
    try:
        import cmaes  # noqa: F401
    except ImportError:
        line = one_problem(data)
        assert line.startswith("<study>: search.sampler: ")
        assert "pip install cmaes" in line
    else:
        assert StudySpec.from_dict(data).search.sampler.name == "cmaes"


@pytest.mark.parametrize(
    ("level", "data", "field", "suggestion"),
    [
        ("top", {"serach": {}}, "serach", "search"),
        ("objective", {"objective": {"model": "cnn", "epoch": 3}}, "objective.epoch", "epochs"),
        (
            "param",
            {"space": {"lr": {"type": "float", "low": 0, "high": 1, "steps": 0.1}}},
            "space.lr.steps",
            "step",
        ),
        ("search", {"search": {"n_trial": 3}}, "search.n_trial", "n_trials"),
        ("cluster", {"cluster": {"adress": "x"}}, "cluster.adress", "address"),
        ("tracking", {"tracking": {"experimnt": "x"}}, "tracking.experimnt", "experiment"),
    ],
)
def test_unknown_keys_at_every_level(
    level: str, data: dict[str, Any], field: str, suggestion: str
) -> None:
    line = one_problem(minimal(**data))
    expected = f"<study>: {field}: unknown key; did you mean '{suggestion}'? (allowed: "
    assert line.startswith(expected), line


def test_unknown_key_lists_the_allowed_keys() -> None:
    line = one_problem(minimal(cluster={"zzz": 1}))
    assert line == (
        "<study>: cluster.zzz: unknown key (allowed: address, n_workers, gpus, slots, "
        "backend, simulated, slurm, kubernetes, adapt, storage_access, tls, metrics)"
    )
    # Keys as the file spells them (``from``, a Python keyword, is ``from_`` in the model).
    line = one_problem(minimal(search={"warm_start": {"from": "old", "topk": 3}}))
    assert line == (
        "<study>: search.warm_start.0.topk: unknown key; did you mean 'top_k'? "
        "(allowed: from, top_k, history)"
    )


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: bad name
            objectiv: {}
            objective:
              model: cnnn
              epochs: 0
              precision: bf61
              params: {dropout: 0.1}
            space:
              lr: {type: float, low: 0.1, high: 0.01}
              dropout: {type: float, low: 0.0, high: 0.5}
              n: {type: int, low: 1, high: 4, step: 0}
              opt: {type: categorical, choices: []}
            search:
              n_trials: abc
              sampler: {name: tpe, n_startup_trial: 2}
              pruner: hyperbnd
            cluster:
              gpus: [1, 1]
            """
        )
    )
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml(path)
    fields = [line.split(": ")[1] for line in info.value.problems]
    assert sorted(fields) == sorted(
        [
            "objectiv",
            "name",
            "objective.model",
            "objective.epochs",
            "objective.precision",
            "space.lr",
            "space.dropout",
            "space.n.step",
            "space.opt.choices",
            "search.n_trials",
            "search.sampler.n_startup_trial",
            "search.pruner",
            "cluster.gpus",
        ]
    )
    assert all(line.startswith(f"{path}: ") for line in info.value.problems)
    assert str(info.value) == "\n".join(info.value.problems)


def test_float_bounds_accept_yaml_exponent_strings() -> None:
    # PyYAML reads 1e-4 (no dot) as a string; it is still a number to the user.
    spec = StudySpec.from_dict(minimal(space={"lr": {"type": "float", "low": "1e-4", "high": 1}}))
    assert spec.space["lr"].low == pytest.approx(1e-4)


# ------------------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (None, None),
        (90, 90.0),
        (1.5, 1.5),
        ("45", 45.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("1.5d", 129600.0),
        (" 10m ", 600.0),
    ],
)
def test_parse_duration(given: Any, seconds: float | None) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize("given", ["2 hours", "1h30m", "-5", "m", "", True, [1], 0, -1.0])
def test_parse_duration_rejects(given: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(given)


def test_timeout_is_normalised_to_seconds() -> None:
    spec = StudySpec.from_dict(minimal(search={"timeout": "2h"}))
    assert spec.search.timeout == 7200.0
    assert spec.to_dict()["search"]["timeout"] == 7200.0


# ------------------------------------------------------------------------------ overrides


def test_overrides_by_alias_and_dotted_key() -> None:
    spec = StudySpec.from_dict(
        minimal(),
        overrides={
            "n_trials": 3,
            "timeout": "90s",
            "seed": 5,
            "max_concurrent": 2,
            "n_workers": 4,
            "scheduler": "tcp://h:8786",
            "gpus": [0, 1],
            "mlflow_uri": "sqlite:///m.db",
            "experiment": "e",
            "storage": "sqlite:///o.db",
            "epochs": 2,
            "precision": "fp32",
            "search.sampler": "random",
            "objective.params.batch_size": 32,
            "space.lr.high": 0.5,
        },
    )
    assert spec.search.n_trials == 3
    assert spec.search.timeout == 90.0
    assert spec.search.seed == 5
    assert spec.search.max_concurrent == 2
    assert spec.cluster.n_workers == 4
    assert spec.cluster.address == "tcp://h:8786"
    assert spec.cluster.gpus == [0, 1]
    assert spec.tracking.mlflow_uri == "sqlite:///m.db"
    assert spec.tracking.experiment == "e"
    assert spec.storage == "sqlite:///o.db"
    assert spec.objective.epochs == 2
    assert spec.objective.precision is Precision.FP32
    assert spec.search.sampler.name == "random"
    assert spec.objective.params == {"batch_size": 32}
    assert spec.space["lr"].high == 0.5


def test_none_overrides_are_skipped() -> None:
    spec = StudySpec.from_dict(minimal(search={"n_trials": 7}), overrides={"n_trials": None})
    assert spec.search.n_trials == 7


def test_overrides_are_validated_and_unknown_ones_reported(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(minimal()))
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml(path, overrides={"n_trial": 3, "search.n_trails": 3, "epochs": 0})
    lines = info.value.problems
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"{path}: n_trial: unknown override; did you mean 'n_trials'?")
    assert lines[1].startswith(f"{path}: search.n_trails: unknown override; did you mean ")
    assert lines[2] == f"{path}: objective.epochs: must be >= 1, got 0"


def test_replace_revalidates() -> None:
    spec = StudySpec.from_dict(minimal())
    changed = spec.replace(n_trials=3, **{"search.pruner": "none"})
    assert changed.search.n_trials == 3
    assert changed.search.pruner.name == "none"
    assert spec.search.n_trials == 20  # the original is unchanged
    with pytest.raises(SpecError, match=r"<study>: search.n_trials: must be >= 1, got 0"):
        spec.replace(n_trials=0)


# ------------------------------------------------------------------------------ user objective


def write_module(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(body))


def test_user_objective_is_found_next_to_the_study_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    studies = tmp_path / "studies"
    write_module(studies, "hps_userobj_ok", "def objective(trial):\n    return 1.0\n")
    (studies / "u.yaml").write_text("name: u\nobjective:\n  model: hps_userobj_ok:objective\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path_before = list(sys.path)
    spec = StudySpec.from_yaml(studies / "u.yaml")
    assert sys.path == path_before
    assert spec.is_user_objective
    assert spec.space == {}
    assert spec.metric == "value"
    assert spec.direction is Direction.MAXIMIZE
    fn = load_user_objective(spec.objective.model, [studies])
    assert fn(None) == 1.0


def test_user_objective_ignores_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_module(tmp_path, "hps_userobj_ds", "def objective(trial):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)  # found through the current folder
    spec = StudySpec.from_dict(
        {"name": "u", "objective": {"model": "hps_userobj_ds:objective", "dataset": "mine"}}
    )
    assert spec.objective.dataset == "mine"


def test_user_objective_in_a_package(tmp_path: Path) -> None:
    write_module(tmp_path / "hps_userpkg", "__init__", "")
    write_module(tmp_path / "hps_userpkg", "train", "def run(trial):\n    return 2.0\n")
    assert load_user_objective("hps_userpkg.train:run", [tmp_path])(None) == 2.0


@pytest.mark.parametrize(
    ("module", "body", "ref", "message"),
    [
        (
            "hps_userobj_none",
            None,
            "hps_userobj_none:objective",
            "objective.model: cannot import 'hps_userobj_none:objective' "
            "(ModuleNotFoundError: No module named 'hps_userobj_none')",
        ),
        (
            "hps_userobj_nofn",
            "x = 1\n",
            "hps_userobj_nofn:objective",
            "objective.model: module 'hps_userobj_nofn' has no function 'objective'",
        ),
        (
            "hps_userobj_notcallable",
            "objective = 3\n",
            "hps_userobj_notcallable:objective",
            "objective.model: 'hps_userobj_notcallable:objective' is not callable",
        ),
        (
            "hps_userobj_raises",
            "raise RuntimeError('boom')\n",
            "hps_userobj_raises:objective",
            "objective.model: cannot import 'hps_userobj_raises:objective' (RuntimeError: boom)",
        ),
    ],
)
def test_user_objective_errors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    body: str | None,
    ref: str,
    message: str,
) -> None:
    studies = tmp_path / "studies"
    studies.mkdir()
    if body is not None:
        write_module(studies, module, body)
    (studies / "u.yaml").write_text(f"name: u\nobjective: {{model: '{ref}'}}\n")
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    with pytest.raises(SpecError) as info:
        StudySpec.from_yaml("studies/u.yaml")
    assert info.value.problems == [f"studies/u.yaml: {message}"]
    assert sys.path == path_before
    with pytest.raises(SpecError) as direct:
        load_user_objective(ref, [studies])
    assert direct.value.problems == [message]


def test_load_user_objective_keeps_the_import_error_as_cause(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_user_objective("hps_userobj_absent:f", [tmp_path])
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


# ------------------------------------------------------------------------------ exceptions


def test_exception_hierarchy_and_numbers() -> None:
    for cls in (SpecError, ClusterError, GpuAllocationError, TrackingError, TrialError):
        assert issubclass(cls, HpsearchError)
    err = GpuAllocationError("needs 2 GPUs, found 1", needed=2, found=1, free=0)
    assert isinstance(err, ClusterError)
    assert (str(err), err.needed, err.found, err.free) == ("needs 2 GPUs, found 1", 2, 1, 0)
    assert err.numbers == {"needed": 2, "found": 1, "free": 0}
    assert ClusterError("no scheduler").numbers == {}
    assert SpecError("one line").problems == ["one line"]
    assert str(SpecError(["a", "b"])) == "a\nb"


def test_importing_the_spec_is_cheap() -> None:
    code = (
        "import sys, hpsearch.spec, hpsearch.exceptions; "
        "heavy = [m for m in ('optuna', 'torch', 'mlflow', 'distributed') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_searched_layout_values_are_checked_at_load() -> None:
    base = {"name": "s", "objective": {"model": "transformer", "dataset": "python-docs"}}
    cases = {
        "parallel.strategy": ({"type": "categorical", "choices": ["ddp", "fsdpp"]}, "fsdpp"),
        "parallel.stages": ({"type": "int", "low": 0, "high": 2}, ">= 1"),
        "parallel.stage": ({"type": "int", "low": 1, "high": 2}, "'parallel.stages'"),
    }
    for key, (param, expected) in cases.items():
        with pytest.raises(SpecError) as info:
            StudySpec.from_dict({**base, "space": {key: param}})
        (line,) = info.value.problems
        assert line.startswith(f"<study>: space.{key}: ") and expected in line, line
