"""MIG instances are devices of their own: discovery lists them (a fake NVML here: GPU 0 in
MIG mode with 3 instances, GPU 1 whole), each worker gets one instance's UUID in
``CUDA_VISIBLE_DEVICES``, a set on MIG is one instance, and trials still pack onto one."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from hpsearch.cluster import DeviceAllocator, WorkerDevices, discover_gpus, nvml_links, worker_specs
from hpsearch.cluster._env import cuda_visible_devices, rank_env, worker_env
from hpsearch.cluster._gpus import GpuInfo, _visible_filter
from hpsearch.cluster._local_backend import local_gpus
from hpsearch.cluster._mig import check_mig_sets, gpu_devices
from hpsearch.exceptions import GpuAllocationError
from hpsearch.metrics._study import _gpu_use
from hpsearch.spec import StudySpec

MIB = 1024 * 1024
A100 = "NVIDIA A100-SXM4-40GB"
#: GPU 0's MIG instances by slot (NVML has 7 slots on an A100; the others are empty).
INSTANCES = {
    0: ("MIG-aaaa", "3g.20gb", 19968),
    2: ("MIG-bbbb", "2g.10gb", 9856),
    5: ("MIG-cccc", "1g.5gb", 4864),
}
MIG_UUIDS = [uuid for uuid, _, _ in INSTANCES.values()]


class _Error(Exception):
    pass


class _NotFound(_Error):
    pass


class _NotSupported(_Error):
    pass


def _fake_nvml(*, mig_support: bool = True) -> types.ModuleType:
    """A ``pynvml`` of two A100s: GPU 0 in MIG mode with :data:`INSTANCES`, GPU 1 whole (MIG
    off, or, without ``mig_support``, a GPU that has no MIG at all)."""
    nvml: Any = types.ModuleType("pynvml")
    nvml.NVMLError, nvml.NVMLError_NotFound, nvml.NVMLError_NotSupported = (
        _Error,
        _NotFound,
        _NotSupported,
    )
    nvml.NVML_DEVICE_MIG_ENABLE = 1
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)

    def mig_mode(handle: tuple) -> list[int]:
        if handle == ("gpu", 1) and not mig_support:
            raise _NotSupported
        return [1, 1] if handle == ("gpu", 0) else [0, 0]

    def mig_handle(handle: tuple, slot: int) -> tuple:
        if handle != ("gpu", 0) or slot not in INSTANCES:
            raise _NotFound
        return ("mig", 0, slot)

    def name(handle: tuple) -> bytes:
        return (
            f"{A100} MIG {INSTANCES[handle[2]][1]}".encode()
            if handle[0] == "mig"
            else A100.encode()
        )

    def uuid(handle: tuple) -> str:
        return INSTANCES[handle[2]][0] if handle[0] == "mig" else f"GPU-{handle[1]}{handle[1]}"

    def memory(handle: tuple) -> Any:
        mib = INSTANCES[handle[2]][2] if handle[0] == "mig" else 40960
        return types.SimpleNamespace(total=mib * MIB, used=0, free=mib * MIB)

    def utilization(handle: tuple) -> Any:
        if handle[0] == "mig":
            raise _NotSupported
        return types.SimpleNamespace(gpu=37, memory=10)

    def no_nvlink(handle: tuple, link: int) -> int:
        raise _NotSupported

    nvml.nvmlDeviceGetMigMode = mig_mode
    nvml.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7 if h == ("gpu", 0) else 0
    nvml.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    nvml.nvmlDeviceGetName, nvml.nvmlDeviceGetUUID = name, uuid
    nvml.nvmlDeviceGetMemoryInfo = memory
    nvml.nvmlDeviceGetUtilizationRates = utilization
    nvml.nvmlDeviceGetNvLinkState = no_nvlink
    return nvml


@pytest.fixture
def mixed_machine(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    nvml = _fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return nvml


def test_each_mig_instance_is_a_device_and_empty_slots_are_skipped(mixed_machine) -> None:
    found = discover_gpus()
    assert found == [
        GpuInfo(0, f"{A100} MIG 3g.20gb", 19968, "MIG-aaaa", mig=0),
        GpuInfo(0, f"{A100} MIG 2g.10gb", 9856, "MIG-bbbb", mig=2),
        GpuInfo(0, f"{A100} MIG 1g.5gb", 4864, "MIG-cccc", mig=5),
        GpuInfo(1, A100, 40960, "GPU-11"),
    ]
    assert [g.device for g in found] == [*MIG_UUIDS, 1]


def test_a_gpu_without_mig_support_stays_one_device(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(mig_support=False))
    found = discover_gpus(use_env=False)
    assert [g.device for g in found] == [*MIG_UUIDS, 1]


def test_cuda_visible_devices_selects_instances(mixed_machine) -> None:
    found = discover_gpus(use_env=False)
    assert [g.device for g in _visible_filter(found, "MIG-bbbb")] == ["MIG-bbbb"]
    assert [g.device for g in _visible_filter(found, "0")] == MIG_UUIDS
    assert [g.device for g in _visible_filter(found, "1,0")] == [1, *MIG_UUIDS]
    assert [g.device for g in discover_gpus(visible="MIG-cccc")] == ["MIG-cccc"]


def test_a_mig_instance_is_given_by_its_uuid_and_alone() -> None:
    assert cuda_visible_devices(["MIG-aaaa"]) == "MIG-aaaa"
    assert cuda_visible_devices([1]) == "1"
    assert cuda_visible_devices([2, 3]) == "2,3"
    assert rank_env(kind="cuda", device_id="MIG-bbbb", threads=2)["CUDA_VISIBLE_DEVICES"] == (
        "MIG-bbbb"
    )
    env = worker_env(kind="cuda", ids=["MIG-aaaa"], threads=4, nthreads=1, lease=False)
    assert env["CUDA_VISIBLE_DEVICES"] == env["HPSEARCH_DEVICE_IDS"] == "MIG-aaaa"
    with pytest.raises(GpuAllocationError, match="a process can use only one MIG instance"):
        cuda_visible_devices(["MIG-aaaa", 1])


def test_worker_layout_gives_each_worker_one_device(mixed_machine) -> None:
    devices = [g.device for g in discover_gpus()]
    specs, plan = worker_specs(gpus=devices, gpus_per_trial=1, n_cores=8, links=nvml_links(devices))
    assert plan.sets == (("MIG-aaaa",), ("MIG-bbbb",), ("MIG-cccc",), (1,)) and not plan.leftover
    envs = [s["options"]["env"] for s in specs.values()]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == [*MIG_UUIDS, "1"]
    assert all(s["options"]["resources"] == {"GPU": 1} for s in specs.values())
    assert all(e["HPSEARCH_THREADS"] == "2" for e in envs)
    worker = WorkerDevices.from_env(envs[1])
    assert worker == WorkerDevices("cuda", ("MIG-bbbb",), 2, False)
    assert worker.local_device("MIG-bbbb") == "cuda:0" and worker.label(worker.ids) == (
        "cuda:MIG-bbbb"
    )
    plain = WorkerDevices.from_env({"CUDA_VISIBLE_DEVICES": "MIG-cccc"})
    assert plain.kind == "cuda" and plain.ids == ("MIG-cccc",)


def test_sets_larger_than_one_on_mig_are_a_one_line_error(mixed_machine) -> None:
    devices = [g.device for g in discover_gpus()]
    message = (
        "gpus_per_trial=2: GPU 0 is split into 3 MIG instances, and a process can use only "
        "one; use gpus_per_trial: 1 (or 1/2, 1/4, 1/8 to pack trials on each)"
    )
    for mixed in (False, True):
        with pytest.raises(GpuAllocationError) as err:
            worker_specs(gpus=devices, gpus_per_trial=2, mixed_sizes=mixed, n_cores=8)
        assert str(err.value) == message
    with pytest.raises(GpuAllocationError, match="a process can use only one MIG instance"):
        worker_specs(gpus=devices, gpus_per_trial=1, mixed_sizes=True, n_cores=8)
    check_mig_sets(devices, 1)
    check_mig_sets(devices, 0.5)
    check_mig_sets([0, 1, 2, 3], 4)


def test_without_nvml_the_error_names_the_instances(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    with pytest.raises(GpuAllocationError) as err:
        worker_specs(gpus=["MIG-aaaa", "MIG-bbbb"], gpus_per_trial=2, n_cores=2)
    assert str(err.value).startswith(
        "gpus_per_trial=2: MIG-aaaa, MIG-bbbb are MIG instances, and a process can use only one"
    )


def test_trials_pack_onto_a_mig_instance(mixed_machine) -> None:
    specs, plan = worker_specs(gpus=["MIG-cccc"], gpus_per_trial=0.5, n_cores=4)
    assert len(specs) == 2 and plan.packed == 2
    for spec in specs.values():
        assert spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] == "MIG-cccc"
        assert spec["options"]["resources"] == {"GPU": 0.5}
    assert plan.describe() == "1 GPU(s), 2 trials on each (1/2 of it per trial): [MIG-cccc]"
    specs, plan = worker_specs(gpus=[*MIG_UUIDS, 1], gpus_per_trial=0.25, n_cores=16)
    assert len(specs) == 16 and {s[0] for s in plan.sets} == {*MIG_UUIDS, 1}


def test_links_and_leases_leave_mig_instances_unlinked(mixed_machine) -> None:
    devices = [*MIG_UUIDS, 1]
    assert nvml_links(devices) == {}
    alloc = DeviceAllocator(tuple(devices), nvml_links(devices))
    assert alloc.lease(1, owner="a") == ("MIG-aaaa",)
    assert alloc.lease(1, owner="b") == ("MIG-bbbb",)
    alloc.release(["MIG-aaaa"])
    assert alloc.lease(1, owner="c") == ("MIG-aaaa",)


def test_a_gpu_index_in_mig_mode_stands_for_its_instances(mixed_machine) -> None:
    assert gpu_devices([1, 0]) == [1, *MIG_UUIDS]
    assert gpu_devices(["MIG-bbbb"]) == ["MIG-bbbb"]
    data = {
        "name": "mig",
        "objective": {"model": "cnn", "dataset": {"name": "digits"}},
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.01}},
        "cluster": {"gpus": [0]},
    }
    assert local_gpus(StudySpec.from_dict(data)) == MIG_UUIDS
    data["cluster"] = {"gpus": "auto"}
    assert local_gpus(StudySpec.from_dict(data)) == [*MIG_UUIDS, 1]
    data["cluster"] = {"gpus": [2]}
    with pytest.raises(GpuAllocationError, match=r"GPU 2 not found \(visible GPUs: 0, 1\)"):
        local_gpus(StudySpec.from_dict(data))


def test_utilisation_leaves_mig_instances_out(mixed_machine) -> None:
    assert _gpu_use(("MIG-aaaa", 1)) == {"cuda:1": 0.37}
    assert _gpu_use(("MIG-aaaa",)) == {}
