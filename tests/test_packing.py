"""Small trials packed several to a device (``objective.gpus_per_trial`` 1/2, 1/4, 1/8): the
layout, the spec, the capacity, and a study whose two trials share one CPU slot, each in its
own worker process with half the slot's memory cap (four to a slot: ``benchmarks/scenarios``)."""

from __future__ import annotations

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from hpsearch import Study
from hpsearch.cluster import Capacity, worker_specs
from hpsearch.cluster._gpus import device_count
from hpsearch.exceptions import GpuAllocationError, SpecError
from hpsearch.spec import StudySpec

from .conftest import mlflow_runs


def _spec(**objective) -> dict:
    return {
        "name": "packed",
        "objective": {"model": "cnn", "dataset": {"name": "digits"}, **objective},
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.01}},
    }


def test_a_fraction_of_a_device_is_written_either_way_and_whole_sizes_keep_their_hash() -> None:
    for written in ("1/4", 0.25):
        spec = StudySpec.from_dict(_spec(gpus_per_trial=written))
        assert (spec.trial_devices, spec.trial_size, spec.packed) == (0.25, 1, 4)
        assert StudySpec.from_dict(spec.to_dict()).trial_devices == 0.25
    whole = StudySpec.from_dict(_spec(gpus_per_trial=2))
    assert (whole.trial_devices, whole.trial_size, whole.packed) == (2.0, 2, 1)
    assert whole.to_dict()["objective"]["gpus_per_trial"] == 2  # an int: the hash is as it was
    assert StudySpec.from_dict(_spec(gpus_per_trial=2.0)).spec_hash == whole.spec_hash


@pytest.mark.parametrize(
    ("objective", "space", "message"),
    [
        (
            {"gpus_per_trial": 0.3},
            {},
            "objective.gpus_per_trial: expected a whole number of devices (>= 1) or a fraction "
            "of one device (1/2, 1/4, 1/8, or 0.5, 0.25, 0.125), got 0.3",
        ),
        (
            {},
            {"gpus_per_trial": {"type": "categorical", "choices": [0.5, 1]}},
            "space.gpus_per_trial: a searched size is a whole number of devices (>= 1)",
        ),
    ],
)
def test_a_bad_fraction_is_a_one_line_error(objective, space, message) -> None:
    data = _spec(**objective)
    data["space"].update(space)
    with pytest.raises(SpecError) as err:
        StudySpec.from_dict(data)
    assert len(err.value.problems) == 1 and message in err.value.problems[0]


def test_packed_workers_share_each_device_and_its_cores() -> None:
    specs, plan = worker_specs(gpus=[0, 1], gpus_per_trial=0.5, n_cores=8)
    seen = [
        (o["options"]["env"]["CUDA_VISIBLE_DEVICES"], o["options"]["resources"])
        for o in specs.values()
    ]
    assert seen == [("0", {"GPU": 0.5})] * 2 + [("1", {"GPU": 0.5})] * 2
    assert {o["options"]["env"]["HPSEARCH_THREADS"] for o in specs.values()} == {"2"}
    assert plan.describe() == "2 GPU(s), 2 trials on each (1/2 of it per trial): [0] [1]"
    specs, plan = worker_specs(gpus=None, gpus_per_trial=0.125, n_slots=1, n_cores=2)
    assert len(specs) == 8 and plan.describe().startswith("1 CPU slot(s), 8 trials on each")
    assert {o["options"]["resources"]["SLOT"] for o in specs.values()} == {0.125}


def test_capacity_counts_fractions_and_a_worker_runs_what_its_threads_allow() -> None:
    packed = Capacity("GPU", {f"w{i}": 0.25 for i in range(8)}, {f"w{i}": 1 for i in range(8)})
    assert packed.total == 2.0 and packed.concurrent_trials(0.25) == 8
    with pytest.raises(Exception, match=r"gpus_per_trial=1: the largest worker has GPU=0.25"):
        packed.check(1)
    whole = Capacity("GPU", {"w": 1.0}, {"w": 1})  # one thread: one trial at a time
    assert whole.concurrent_trials(0.25) == 1


def test_command_line_device_counts() -> None:
    assert [device_count(t) for t in ("1/2", "0.125", "3")] == [0.5, 0.125, 3.0]
    for bad in ("0.3", "0", "two", "1.5"):
        with pytest.raises(GpuAllocationError, match="--gpus-per-trial: expected a whole"):
            device_count(bad)


@pytest.mark.slow
def test_two_trials_share_one_slot_and_the_one_over_its_half_fails_alone(run_dir) -> None:
    """One CPU slot, ``gpus_per_trial: 1/2``: two worker processes on it run the two trials
    at once; the memory cap of the slot (6 MiB) is split, so the trial whose parameters,
    gradients and Adam state take 4 MiB fails "out of memory" over its 3 MiB (it would fit
    the whole slot), and its neighbour completes (``benchmarks/scenarios``: four to a slot)."""
    pack_one_slot(run_dir, "1/2", "6MiB", [16, 64])


def pack_one_slot(run_dir, fraction: str, cap: str, channels: list[int]) -> None:
    """As many trials as ``channels`` (the largest takes 4 MiB with its gradients and Adam
    state, over its ``fraction`` of the slot's ``cap``) packed on one CPU slot at once: the
    largest fails "out of memory" alone, each in its own process."""
    spec = StudySpec.from_dict(
        {
            "name": "packed",
            "objective": {
                "model": "cnn",
                "dataset": {"name": "digits", "size": 16, "limit": 400},
                "epochs": 2,
                "precision": "fp32",
                "gpus_per_trial": fraction,
                "max_memory_per_device": cap,
                "params": {"batch_size": 32, "n_blocks": 1, "lr": 0.003},
                "checkpoint_interval": None,
            },
            "space": {"channels": {"type": "categorical", "choices": channels}},
            "search": {"n_trials": len(channels), "sampler": "grid", "pruner": "none", "seed": 0},
            "cluster": {"slots": 1},
        }
    )
    Study(spec, run_dir=run_dir).run()
    study = optuna.load_study(
        study_name="packed",
        storage=JournalStorage(JournalFileBackend(str(run_dir / "packed" / "optuna.journal"))),
    )
    trials = {t.params["channels"]: t for t in study.trials}
    assert sorted(trials) == sorted(channels)
    big = trials.pop(max(channels))
    assert big.state == optuna.trial.TrialState.FAIL
    reason = big.user_attrs["hpsearch.fail_reason"]
    assert reason.startswith(
        "out of memory: "
    ) and f"its {fraction} of objective.max_memory_per_device" in (reason), reason
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials.values())
    # Each in its own process, all on the one slot, all at once.
    _, runs = mlflow_runs(f"sqlite:///{run_dir / 'mlflow.db'}", "packed")
    runs = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    assert len(runs) == len(channels)
    assert len({r.data.tags["hpsearch.pid"] for r in runs}) == len(channels)
    assert {r.data.tags["hpsearch.devices"] for r in runs} == {
        runs[0].data.tags["hpsearch.devices"]
    }
    every = [*trials.values(), big]
    assert max(t.datetime_start for t in every) < min(t.datetime_complete for t in every)
