"""GPU inventories, the set planner, worker layouts and the device allocator (pure, fast)."""

from __future__ import annotations

import itertools
import random
import threading

import pytest

from hpsearch.cluster import DeviceAllocator, WorkerDevices, plan_sets, worker_specs
from hpsearch.cluster._base import Capacity
from hpsearch.cluster._gpus import GpuInfo, _visible_filter, parse_nvidia_smi
from hpsearch.exceptions import ClusterError, GpuAllocationError


def _check_plan(devices, size, plan):
    used = [d for s in plan.sets for d in s]
    assert len(used) == len(set(used)), "sets are disjoint"
    assert set(used) <= set(devices), "sets stay within the inventory"
    assert all(len(s) == size for s in plan.sets)
    assert sorted(used + list(plan.leftover)) == sorted(devices), "nothing is dropped"
    assert len(plan.sets) == len(devices) // size
    assert len(plan.leftover) < size


@pytest.mark.parametrize("n,size", [(n, k) for n in range(0, 10) for k in range(1, 5)])
def test_planner_properties_without_topology(n, size):
    devices = list(range(n))
    plan = plan_sets(devices, size)
    _check_plan(devices, size, plan)
    assert plan.sets == tuple(tuple(devices[i * size : (i + 1) * size]) for i in range(n // size))


def test_planner_properties_on_random_inventories_and_topologies():
    rng = random.Random(0)
    for _ in range(300):
        devices = rng.sample(range(16), rng.randint(1, 12))
        size = rng.randint(1, 5)
        links = {
            frozenset(p): rng.choice([10, 20, 30, 40, 118])
            for p in itertools.combinations(devices, 2)
        }
        plan = plan_sets(devices, size, links=links if rng.random() < 0.7 else None)
        _check_plan(devices, size, plan)


def test_planner_prefers_linked_gpus():
    # An 8-GPU node whose NVLink pairs are (0,4) (1,5) (2,6) (3,7): sets of 2 follow them.
    links = {frozenset(p): 20 for p in itertools.combinations(range(8), 2)}
    for a in range(4):
        links[frozenset((a, a + 4))] = 118
    assert plan_sets(list(range(8)), 2, links=links).sets == ((0, 4), (1, 5), (2, 6), (3, 7))
    # Two quads joined inside, slow between: sets of 4 keep each quad together.
    quad = {
        frozenset(p): (118 if (p[0] < 4) == (p[1] < 4) else 10)
        for p in itertools.combinations(range(8), 2)
    }
    assert set(plan_sets([0, 4, 1, 5, 2, 6, 3, 7], 4, links=quad).sets) == {
        (0, 1, 2, 3),
        (4, 5, 6, 7),
    }


def test_planner_rejects_bad_input():
    with pytest.raises(GpuAllocationError, match=">= 1"):
        plan_sets([0, 1], 0)
    with pytest.raises(GpuAllocationError, match="twice"):
        plan_sets([0, 0, 1], 1)


def test_one_worker_per_set_sees_only_its_gpus():
    specs, _plan = worker_specs(gpus=[0, 1, 2, 3, 4, 5, 6, 7], gpus_per_trial=2, n_cores=16)
    assert len(specs) == 4
    seen = []
    for spec in specs.values():
        opts = spec["options"]
        visible = [int(x) for x in opts["env"]["CUDA_VISIBLE_DEVICES"].split(",")]
        assert opts["resources"] == {"GPU": 2}
        assert opts["nthreads"] == 1
        assert opts["env"]["HPSEARCH_DEVICE_KIND"] == "cuda"
        assert opts["env"]["HPSEARCH_THREADS"] == "4"
        assert opts["host"] == "127.0.0.1"
        seen.extend(visible)
    assert sorted(seen) == list(range(8)) and len(seen) == len(set(seen))


def test_leftover_gpus_are_reported():
    specs, plan = worker_specs(gpus=[0, 1, 2], gpus_per_trial=2, n_cores=4)
    assert len(specs) == 1 and plan.leftover == (2,)
    assert "left over" in plan.describe() and "2" in plan.describe()


def test_mixed_sizes_get_one_leasing_worker():
    specs, _ = worker_specs(gpus=[0, 1, 2, 3], gpus_per_trial=4, mixed_sizes=True, n_cores=8)
    (spec,) = specs.values()
    opts = spec["options"]
    assert opts["resources"] == {"GPU": 4} and opts["nthreads"] == 4
    assert opts["env"]["HPSEARCH_LEASE"] == "1" and opts["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_cpu_slots_layout():
    specs, _plan = worker_specs(gpus=None, gpus_per_trial=1, n_cores=2)
    assert [s["options"]["resources"] for s in specs.values()] == [{"SLOT": 1}, {"SLOT": 1}]
    assert [s["options"]["env"]["HPSEARCH_DEVICE_IDS"] for s in specs.values()] == ["0", "1"]
    assert all("CUDA_VISIBLE_DEVICES" not in s["options"]["env"] for s in specs.values())
    specs, _ = worker_specs(gpus=None, gpus_per_trial=2, n_slots=4, n_cores=2)
    assert [s["options"]["env"]["HPSEARCH_DEVICE_IDS"] for s in specs.values()] == ["0,1", "2,3"]
    with pytest.raises(GpuAllocationError, match="gpus_per_trial=3"):
        worker_specs(gpus=None, gpus_per_trial=3, n_slots=2, n_cores=2)


def test_allocator_never_leases_a_device_twice():
    alloc = DeviceAllocator((0, 1, 2, 3, 4, 5, 6, 7))
    leases: list[tuple[int, ...]] = []
    lock = threading.Lock()
    errors = []

    def worker(seed):
        rng = random.Random(seed)
        for _ in range(200):
            size = rng.choice([1, 2])
            try:
                got = alloc.lease(size, owner=str(seed))
            except GpuAllocationError:
                continue
            with lock:
                flat = [d for lease in leases for d in lease]
                if set(got) & set(flat):
                    errors.append((got, flat))
                leases.append(got)
            with lock:
                leases.remove(got)
            alloc.release(got)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert not alloc.leased
    with pytest.raises(GpuAllocationError, match="needs 9"):
        alloc.lease(9, owner="big")


def test_allocator_prefers_linked_devices():
    links = {frozenset((0, 2)): 118, frozenset((1, 3)): 118}
    alloc = DeviceAllocator((0, 1, 2, 3), links)
    assert alloc.lease(2, owner="a") == (0, 2)
    assert alloc.lease(2, owner="b") == (1, 3)


def test_discovery_parsing_and_visible_devices():
    text = "".join(f"{i}, NVIDIA A100-SXM4-80GB, 81920, GPU-{c * 3}\n" for i, c in enumerate("abc"))
    gpus = parse_nvidia_smi(text)
    assert [g.index for g in gpus] == [0, 1, 2] and gpus[0].memory_mib == 81920
    assert [g.index for g in _visible_filter(gpus, "2,0")] == [2, 0]
    assert [g.index for g in _visible_filter(gpus, "GPU-bbb")] == [1]
    assert [g.index for g in _visible_filter(gpus, "1,9,2")] == [1], (
        "CUDA stops at an invalid entry"
    )
    assert _visible_filter(gpus, "") == []
    assert _visible_filter([GpuInfo(0, "x", 1)], None) == [GpuInfo(0, "x", 1)]


def test_worker_devices_from_env():
    assert WorkerDevices.from_env({"CUDA_VISIBLE_DEVICES": "4,5"}).ids == (4, 5)
    wd = WorkerDevices.from_env(
        {
            "HPSEARCH_DEVICE_KIND": "cuda",
            "HPSEARCH_DEVICE_IDS": "4,5",
            "CUDA_VISIBLE_DEVICES": "4,5",
            "HPSEARCH_THREADS": "6",
            "HPSEARCH_LEASE": "1",
        }
    )
    assert wd == WorkerDevices("cuda", (4, 5), 6, True)
    assert wd.local_device(5) == "cuda:1" and wd.label([4, 5]) == "cuda:4,cuda:5"
    cpu = WorkerDevices.from_env({"HPSEARCH_DEVICE_KIND": "cpu", "HPSEARCH_DEVICE_IDS": "2,3"})
    assert cpu.local_device(3) == "cpu" and cpu.label([2, 3]) == "slot:2,slot:3"


def test_capacity_check_says_what_is_missing():
    cap = Capacity("GPU", {"tcp://a": 2.0, "tcp://b": 2.0})
    assert cap.concurrent_trials(1) == 4 and cap.concurrent_trials(2) == 2
    cap.check(2)
    with pytest.raises(ClusterError, match=r"gpus_per_trial=4.*GPU=2") as err:
        cap.check(4)
    assert err.value.needed == 4 and err.value.found == 2
    with pytest.raises(ClusterError, match="no workers"):
        Capacity(None).check(1)


def test_cpu_slot_sets_are_described_as_such():
    """On a machine without GPUs the sets are of CPU slots, and ``--dry-run`` says so."""
    from hpsearch.cluster._local import worker_specs

    _, plan = worker_specs(gpus=[], gpus_per_trial=1, n_slots=2)
    assert plan.describe().startswith("2 CPU slot set(s) of 1: [0] [1]")
    assert "GPU" not in plan.describe()
