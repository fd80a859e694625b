"""Pipeline-parallel trials: a transformer cut into stages on gloo ranks, on CPU slots."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.exceptions import SpecError
from hpsearch.spec import StudySpec
from hpsearch.testing.families import train_pipeline_case

from .conftest import mlflow_runs, spawn_ranks

#: How close a 2-stage pipeline's losses are to one rank's (fp32; measured: within 1e-7).
REL_TOL = 1e-5

TEXT = {"name": "python-docs", "max_chars": 20000}
SEARCHED = {"parallel.strategy": {"type": "categorical", "choices": ["ddp", "pipeline"]}}
SMALL = {"width": 32, "depth": 2, "heads": 4, "dropout": 0.0, "seq_len": 32, "batch_size": 16}


def _study(run_dir, name):
    return optuna.load_study(
        study_name=name,
        storage=JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal"))),
    )


def _spec(name, *, model="transformer", parallel=None, space=None, epochs=2, **objective):
    return {
        "name": name,
        "objective": {
            "model": model,
            "dataset": TEXT,
            "epochs": epochs,
            "precision": "fp32",
            "gpus_per_trial": 2,
            "params": dict(SMALL),
            "checkpoint_interval": 0,
            **({"parallel": parallel} if parallel is not None else {}),
            **objective,
        },
        "space": space or {"lr": {"type": "categorical", "choices": [0.003]}},
        "search": {"n_trials": 1, "sampler": "random", "pruner": "none", "seed": 0},
    }


@pytest.mark.slow
def test_two_stage_pipeline_matches_one_rank_with_both_schedules(tmp_path):

    from hpsearch.testing.families import pipeline_rank

    layouts = [
        {"strategy": "pipeline", "stages": 2, "microbatches": 2, "schedule": "gpipe"},
        {"strategy": "pipeline", "stages": 2, "microbatches": 4, "schedule": "1f1b"},
    ]
    spawn_ranks(pipeline_rank, str(tmp_path), layouts)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    one = train_pipeline_case()
    for i, layout in enumerate(layouts):
        for a, b in zip(ranks[0][i], ranks[1][i], strict=True):
            del a["samples_per_s"], b["samples_per_s"]
            assert a == b, "every rank returns the same metrics"
        for step, (pipe, alone) in enumerate(zip(ranks[0][i], one, strict=True)):
            for key in ("train_loss", "val_loss", "val_perplexity", "val_accuracy"):
                assert pipe[key] == pytest.approx(alone[key], rel=REL_TOL), (
                    layout["schedule"],
                    step,
                    key,
                )
        assert ranks[0][i][1]["train_loss"] < ranks[0][i][0]["train_loss"], "it learns"


def test_pipeline_spec_errors_are_one_line_each(tmp_path):
    cases = [
        (
            _spec("s", parallel={"strategy": "pipeline", "stages": 3}),
            "objective.parallel.stages: 3 pipeline stages do not divide the trial's set of 2",
        ),
        (
            _spec("s", parallel={"strategy": "pipeline", "microbatches": 3}),
            "objective.parallel.microbatches: 3 micro-batches do not divide the batch",
        ),
        (
            _spec("s", model="cnn", parallel="pipeline", dataset="digits"),
            "objective.parallel.strategy: model 'cnn' cannot be cut into pipeline stages",
        ),
        (
            _spec(
                "s",
                model="lstm",
                space={
                    "parallel.strategy": {"type": "categorical", "choices": ["ddp", "pipeline"]}
                },
            ),
            "space.parallel.strategy: model 'lstm' cannot be cut into pipeline stages",
        ),
        (
            _spec("s", parallel={"strategy": "pipeline", "microbatches": 1}),
            "the 1f1b schedule needs at least as many micro-batches as stages",
        ),
    ]
    for raw, expected in cases:
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(SpecError) as exc:
            StudySpec.from_yaml(path)
        assert len(exc.value.problems) == 1, exc.value.problems
        (line,) = exc.value.problems
        assert line.startswith(f"{path}: ") and expected in line, line
    ok = _spec(
        "s", space={"parallel.strategy": {"type": "categorical", "choices": ["ddp", "pipeline"]}}
    )
    assert StudySpec.from_dict(ok).parallel_for({"parallel.strategy": "pipeline"}).stages is None


@pytest.mark.slow
def test_a_resumed_pipeline_continues_exactly(tmp_path):

    from hpsearch.testing.families import pipeline_resume_rank

    spawn_ranks(pipeline_resume_rank, str(tmp_path))
    result = json.loads((tmp_path / "rank0.json").read_text())
    straight, resumed = result["straight"], result["resumed"]
    for key in ("train_loss", "val_loss"):
        assert resumed[key] == pytest.approx(straight[key], rel=1e-9), key


def _notes(run_dir, name, number):
    return [
        (run_dir / name / f"notes-{number}-rank{r}.txt").read_text().split("\n")[:-1]
        for r in (0, 1)
    ]


@pytest.mark.slow
def test_a_study_searches_the_layout_and_a_memory_cap_leaves_what_fits(run_dir, two_slot_client):
    """The model's parameters + gradients + Adam state (629 kB whole; 379 kB for the larger
    of 2 stages, about 315 kB per fsdp shard) over a 500 kB cap per device: ddp runs out of
    memory on the same 2-device set where the pipeline and fsdp train."""
    cap = 500_000
    spec = _spec("layouts", space=SEARCHED, epochs=1, max_memory_per_device=cap)
    spec["objective"]["parallel"] = {"stages": 2, "microbatches": 2}
    spec["search"]["n_trials"] = 2  # seed 0: pipeline, then ddp
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    trials = {t.params["parallel.strategy"]: t for t in _study(run_dir, "layouts").trials}
    assert set(trials) == {"ddp", "pipeline"}
    assert trials["pipeline"].state == TrialState.COMPLETE, trials["pipeline"].user_attrs
    assert trials["pipeline"].value < 40, "well under the vocabulary size"
    assert trials["ddp"].state == TrialState.FAIL
    reason = trials["ddp"].user_attrs["hpsearch.fail_reason"]
    assert reason.startswith("out of memory: ") and "max_memory_per_device" in reason, reason
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "layouts")
    by_tag = {
        r.data.tags.get("hpsearch.parallel"): r
        for r in runs
        if "hpsearch.trial_number" in r.data.tags
    }
    assert set(by_tag) == {"ddp", "pipeline: 2 stages x 1 pipelines, 2 micro-batches, 1f1b"}
    piped = by_tag["pipeline: 2 stages x 1 pipelines, 2 micro-batches, 1f1b"].data.metrics
    assert piped["train_state_bytes_per_rank"] <= cap

    sharded = _spec("layouts-fsdp", parallel="fsdp", epochs=1, max_memory_per_device=cap)
    Study(sharded, run_dir=run_dir, client=two_slot_client).run()
    (trial,) = _study(run_dir, "layouts-fsdp").trials
    assert trial.state == TrialState.COMPLETE, trial.user_attrs


@pytest.mark.slow
def test_pruning_stops_every_rank_of_every_stage_at_the_same_step(run_dir, two_slot_client):
    spec = _spec(
        "pipe-prune",
        model="hpsearch.testing.objectives:pipeline_transformer",
        parallel={"strategy": "pipeline", "stages": 2, "microbatches": 2},
        space={"lr": {"type": "categorical", "choices": [1e-6, 0.003]}},  # seed 0: 0.003 first
        epochs=3,
        direction="minimize",
    )
    spec["search"].update(
        n_trials=2,
        pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 2},
    )
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    trials = _study(run_dir, "pipe-prune").trials
    states = sorted(t.state.name for t in trials)
    assert states == ["COMPLETE", "PRUNED"], [(t.params, t.state, t.user_attrs) for t in trials]
    for t in trials:
        stage0, stage1 = _notes(run_dir, "pipe-prune", t.number)
        assert stage0 == stage1, "both stages trained the same steps"
        last = 2 if t.state == TrialState.PRUNED else 3
        assert stage0 == [f"step {s}" for s in range(1, last + 1)]
        assert max(t.intermediate_values) == last


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1])
def test_a_stage_that_raises_fails_the_trial_without_a_hang(run_dir, two_slot_client, stage):
    name = f"pipe-raise-{stage}"
    spec = _spec(
        name,
        model="hpsearch.testing.objectives:pipeline_transformer",
        parallel={"strategy": "pipeline", "stages": 2, "microbatches": 2},
        direction="minimize",
        trial_timeout=120,
    )
    # At the first step: the other stage waits for it in the pipeline's first exchange.
    spec["objective"]["params"].update(fail_rank=stage, fail_step=1)
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    (trial,) = _study(run_dir, name).trials
    assert trial.state == TrialState.FAIL
    reason = trial.user_attrs["hpsearch.fail_reason"]
    assert f"rank {stage} (stage {stage}) broke on purpose" in reason, reason
    assert "timed out" not in reason
