"""Sharded trials (objective.parallel: fsdp) for real: FSDP2 over gloo ranks on CPU slots."""

from __future__ import annotations

import json
import shutil

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.exceptions import SpecError
from hpsearch.spec import StudySpec
from hpsearch.testing import user_spec

from .conftest import mlflow_runs, spawn_ranks

pytestmark = pytest.mark.slow

#: 2-rank fsdp against 1 rank (and against 2-rank ddp), per epoch: the same global batches
#: and initial weights, so only floating-point summation order differs (measured: under
#: 1e-5 relative).
LOSS_RTOL = 1e-3


def _study(run_dir, name):
    return optuna.load_study(
        study_name=name,
        storage=JournalStorage(JournalFileBackend(str(run_dir / name / "optuna.journal"))),
    )


def _run(run_dir, name):
    client, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", name)
    return client, sorted(
        (r for r in runs if "hpsearch.trial_number" in r.data.tags),
        key=lambda r: int(r.data.tags["hpsearch.trial_number"]),
    )


def _cnn(name, size, strategy, *, epochs=2, cap=None, lrs=(0.003,), n_trials=1, pruner="none"):
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": {"name": "digits", "limit": 800},
            "epochs": epochs,
            "precision": "fp32",
            "gpus_per_trial": size,
            "parallel": strategy,
            "max_memory_per_device": cap,
            "params": {"batch_size": 64, "dropout": 0.0},
            "checkpoint_interval": 0,
        },
        "space": {"lr": {"type": "categorical", "choices": list(lrs)}},
        "search": {
            "n_trials": n_trials,
            "sampler": "random",
            "pruner": pruner,
            "seed": 0,
            "max_concurrent": 1,
        },
    }


def test_fsdp_matches_ddp_halves_parameter_bytes_and_fits_a_memory_cap(run_dir, two_slot_client):
    # The cnn: 143,656 bytes of parameters, 574,656 with gradients and Adam's two moments.
    # (The 1-rank comparison is in the resume test below, on the same trainer.)
    cap = "400kB"
    Study(_cnn("ddp", 2, "ddp"), run_dir=run_dir, client=two_slot_client).run()
    Study(_cnn("fsdp", 2, "fsdp", cap=cap), run_dir=run_dir, client=two_slot_client).run()
    Study(_cnn("ddp-capped", 2, "ddp", cap=cap), run_dir=run_dir, client=two_slot_client).run()
    ddp, fsdp, capped = (_study(run_dir, n).trials[0] for n in ("ddp", "fsdp", "ddp-capped"))
    assert ddp.state == fsdp.state == TrialState.COMPLETE, fsdp.user_attrs
    client, (run_ddp,) = _run(run_dir, "ddp")
    _, (run_fsdp,) = _run(run_dir, "fsdp")

    def history(run, key):
        return [
            m.value
            for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
        ]

    assert history(run_fsdp, "train_loss") == pytest.approx(
        history(run_ddp, "train_loss"), rel=LOSS_RTOL
    )
    for step in (1, 2):
        assert fsdp.intermediate_values[step] == pytest.approx(
            ddp.intermediate_values[step], abs=0.01
        )
    m_ddp, m_fsdp = run_ddp.data.metrics, run_fsdp.data.metrics
    assert m_ddp["param_bytes_rank0"] == m_ddp["param_bytes_rank1"] == m_ddp["param_bytes_per_rank"]
    ratio = m_fsdp["param_bytes_per_rank"] / m_ddp["param_bytes_per_rank"]
    assert 0.45 <= ratio <= 0.55, f"fsdp holds {ratio:.3f} of the model per rank"
    assert (
        m_fsdp["param_bytes_rank0"] + m_fsdp["param_bytes_rank1"] >= m_ddp["param_bytes_per_rank"]
    )
    for r in (0, 1):
        assert m_fsdp[f"peak_rss_bytes_rank{r}"] > 0
        assert m_fsdp[f"train_state_bytes_rank{r}"] <= 400_000
    assert run_fsdp.data.tags["hpsearch.parallel"] == "fsdp"
    # The same model and set under ddp holds it all on each rank: over the cap.
    assert capped.state == TrialState.FAIL
    reason = capped.user_attrs["hpsearch.fail_reason"]
    assert reason.startswith("out of memory: ") and "max_memory_per_device" in reason, reason
    _, (run_capped,) = _run(run_dir, "ddp-capped")
    assert run_capped.data.tags["hpsearch.error_type"] == "TrialOutOfMemory"


def test_pruning_stops_every_fsdp_rank_at_the_same_step(run_dir, two_slot_client):
    from hpsearch.worker._ranks import rank_pool

    def pids():
        (value,) = two_slot_client.run(lambda: sorted(rank_pool().pids())).values()
        return value

    spec = _cnn(
        "fsdp-prune",
        2,
        "fsdp",
        epochs=3,
        lrs=(1e-6, 0.003),
        n_trials=2,
        pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
    )
    before = pids()
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    trials = _study(run_dir, "fsdp-prune").trials
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert len(pruned) == 1 and trials[0].state == TrialState.COMPLETE, [t.params for t in trials]
    (k,) = pruned[0].intermediate_values
    assert k == 1
    client, runs = _run(run_dir, "fsdp-prune")
    run = runs[pruned[0].number]
    # Rank 1's numbers are gathered every epoch it trains: it trained up to k, no further.
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "param_bytes_rank1")]
    assert steps == [k]
    assert run.data.tags["hpsearch.prune_step"] == str(k)
    # No rank was left training (the pool kills ranks still busy after rank 0 has ended).
    after = pids()
    assert len(after) == 2 and (not before or after == before)


def test_fsdp_matches_one_rank_and_resumes_from_its_sharded_checkpoint(tmp_path):
    """2 fsdp ranks train 3 epochs as 1 rank does; 2 ranks train 2 epochs and checkpoint
    sharded, a fresh pair loads it and trains epoch 3 as the straight run did; a lone rank
    (no process group) resumes from it too (DCP reshards); a checkpoint without its marker
    is never loaded."""

    from hpsearch.testing.families import fsdp_resume_rank, train_briefly
    from hpsearch.training._fsdp import MARKER, ShardedCheckpointStore, param_bytes

    spawn_ranks(fsdp_resume_rank, str(tmp_path))
    ranks = [json.loads((tmp_path / f"fsdp-rank{r}.json").read_text()) for r in (0, 1)]
    for res in ranks:
        assert res["loaded_epoch"] == 2
        for key in ("train_loss", "val_loss", "val_accuracy"):
            assert res["resumed"][key] == pytest.approx(res["straight"][key], rel=1e-6), key
    assert ranks[0]["resumed"]["val_loss"] == ranks[1]["resumed"]["val_loss"]
    alone = train_briefly("cnn", epochs=3)
    for key in ("train_loss", "val_loss"):
        assert [e[key] for e in ranks[0]["straight_epochs"]] == pytest.approx(
            [e[key] for e in alone["epochs"]], rel=LOSS_RTOL
        ), key
    full = param_bytes([alone["trainer"].model])
    assert ranks[0]["param_bytes"] + ranks[1]["param_bytes"] >= full
    assert max(ranks[0]["param_bytes"], ranks[1]["param_bytes"]) <= 0.55 * full

    # The same checkpoint on a set of one: resharded by DCP on load.
    lone = train_briefly("cnn", epochs=0, strategy="fsdp")
    store = ShardedCheckpointStore(tmp_path / "ckpt", 0, rank=0, world_size=1)
    meta = store.load_into(lone["trainer"], resumed=True)
    assert meta is not None and meta["epoch"] == 2 and meta["written_by_world_size"] == 2
    third = lone["trainer"].train_epoch(lone["data"], 3)
    assert third["train_loss"] == pytest.approx(ranks[0]["straight"]["train_loss"], rel=LOSS_RTOL)

    # A checkpoint cut short (no marker: the worker died before rank 0 finished it) is
    # skipped for the one before; a half-written temporary folder is cleared away.
    (tmp_path / "ckpt" / "trial-0.dcp" / MARKER).unlink()
    shutil.copytree(tmp_path / "ckpt" / "trial-0.dcp", tmp_path / "ckpt" / ".trial-0.dcp.3.tmp")
    store = ShardedCheckpointStore(tmp_path / "ckpt", 0, rank=0, world_size=1)
    assert not (tmp_path / "ckpt" / ".trial-0.dcp.3.tmp").exists()
    fresh = train_briefly("cnn", epochs=0, strategy="fsdp")
    assert store.load_into(fresh["trainer"], resumed=True)["epoch"] == 1
    assert store.load_into(fresh["trainer"], resumed=False) is None, "a fresh trial starts over"


def test_the_transformer_may_shard_and_fsdp_be_searched_as_a_layout():
    """The spec side of the transformer under fsdp (``benchmarks/scenarios`` trains it on two
    ranks against one)."""
    lr = {"type": "float", "low": 1e-4, "high": 1e-2}
    objective = {"model": "transformer", "dataset": "python-docs", "gpus_per_trial": 2}
    StudySpec.from_dict(
        {"name": "t", "objective": {**objective, "parallel": "fsdp"}, "space": {"lr": lr}}
    )
    searched = {"type": "categorical", "choices": ["ddp", "fsdp", "pipeline"]}
    spec = StudySpec.from_dict(
        {"name": "t", "objective": objective, "space": {"lr": lr, "parallel.strategy": searched}}
    )
    assert spec.parallel_for({"parallel.strategy": "fsdp"}).strategy.value == "fsdp"


def test_spec_errors_for_fsdp_are_one_line_each():
    base = {"name": "s", "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2}}}
    with pytest.raises(SpecError) as err:
        StudySpec.from_dict(
            {
                **base,
                "objective": {"model": "gan", "parallel": "fsdp", "max_memory_per_device": "2 GB!"},
            },
            source="g.yaml",
        )
    lines = err.value.problems
    assert len(lines) == 2, lines
    assert lines[0].startswith("g.yaml: objective.max_memory_per_device: expected bytes")
    assert lines[1].startswith("g.yaml: objective.parallel: model 'gan' does not support the fsdp")
    with pytest.raises(SpecError) as err:
        StudySpec.from_dict(
            {
                "name": "s",
                "objective": {"model": "gan"},
                "space": {"parallel.strategy": {"type": "categorical", "choices": ["ddp", "fsdp"]}},
            },
            source="g.yaml",
        )
    (line,) = err.value.problems
    assert line.startswith("g.yaml: space.parallel.strategy: model 'gan' does not support")
    spec = StudySpec.from_dict(
        {
            **base,
            "objective": {"model": "lstm", "parallel": "fsdp", "max_memory_per_device": "2GiB"},
        }
    )
    assert spec.objective.max_memory_per_device == 2 * 1024**3
    assert spec.parallel_for({}).strategy.value == "fsdp"
    plain = StudySpec.from_dict({**base, "objective": {"model": "cnn"}})
    assert "max_memory_per_device" not in plain.to_dict()["objective"], "spec_hash kept"


def test_an_fsdp_rank_that_raises_fails_the_trial_without_a_hang(run_dir, two_slot_client):
    spec = user_spec("fsdp-raise", "hpsearch.testing.objectives:fsdp_rank1_raises", n_trials=1)
    spec["objective"]["gpus_per_trial"] = 2
    spec["search"]["pruner"] = "none"
    Study(spec, run_dir=run_dir, client=two_slot_client).run()
    (trial,) = _study(run_dir, "fsdp-raise").trials
    assert trial.state == TrialState.FAIL
    reason = trial.user_attrs["hpsearch.fail_reason"]
    assert "rank 1" in reason and "broke on purpose" in reason, reason
    assert trial.duration.total_seconds() < 60
