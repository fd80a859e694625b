"""How jobs follow the trials on a batch system (:class:`hpsearch.cluster._scaling.JobScaler`),
on a stand-in of dask-jobqueue's cluster and Dask's client: the scaler's own decisions."""

from __future__ import annotations

from typing import Any

import pytest

from hpsearch.cluster import _scaling
from hpsearch.cluster._scaling import IDLE_GRACE_S, JobScaler


class _Jobs:
    """dask-jobqueue's cluster as the scaler uses it: ``worker_spec``, ``workers``,
    ``scale(jobs=)`` and ``scale_down`` through ``sync``."""

    def __init__(self) -> None:
        self.worker_spec: dict[str, Any] = {}
        self.workers: dict[str, Any] = {}
        self.ended: list[str] = []
        self._next = 0

    def scale(self, jobs: int) -> None:
        while len(self.worker_spec) < jobs:
            name = f"SLURMCluster-{self._next}"
            self._next += 1
            self.worker_spec[name] = self.workers[name] = object()

    def scale_down(self, names: list[str]) -> None:
        for name in names:
            self.ended.append(name)
            self.worker_spec.pop(name, None)
            self.workers.pop(name, None)

    def sync(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


class _Client:
    """The scheduler's view: one worker per joined job; ``busy`` holds the busy jobs."""

    def __init__(self, jobs: _Jobs) -> None:
        self.jobs = jobs
        self.busy: set[str] = set()

    def scheduler_info(self, n_workers: int = -1) -> dict:
        return {"workers": {f"tcp://{n}": {"name": f"{n}-0"} for n in self.jobs.worker_spec}}

    def processing(self) -> dict:
        return {f"tcp://{n}": (["trial"] if n in self.busy else []) for n in self.jobs.worker_spec}

    def has_what(self) -> dict:
        return {f"tcp://{n}": [] for n in self.jobs.worker_spec}


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(_scaling.time, "monotonic", lambda: now[0])
    return now


def test_jobs_follow_the_trials_between_minimum_and_maximum(clock):
    jobs = _Jobs()
    scaler = JobScaler(jobs, _Client(jobs), minimum=0, maximum=2, sets_per_job=1)
    scaler.update(4)
    assert len(jobs.worker_spec) == 2 and scaler.submitted == 2
    scaler.update(0)  # idle now, but not yet for long
    assert jobs.ended == []
    clock[0] += IDLE_GRACE_S
    scaler.update(0)
    assert sorted(jobs.ended) == ["SLURMCluster-0", "SLURMCluster-1"]


def test_a_moment_between_two_trials_ends_no_job(clock):
    """One trial ends and the next starts on the same job: the wanted count dips for a moment
    (two looks in quick succession), and the job is not ended and submitted again."""
    jobs = _Jobs()
    client = _Client(jobs)
    scaler = JobScaler(jobs, client, minimum=0, maximum=2, sets_per_job=1)
    scaler.update(2)
    client.busy = {"SLURMCluster-0"}
    for wanted in (1, 2, 1, 2):  # looks at each change, milliseconds apart
        clock[0] += 0.01
        scaler.update(wanted)
    assert jobs.ended == [] and scaler.submitted == 2


def test_a_job_busy_with_a_trial_is_never_ended(clock):
    jobs = _Jobs()
    client = _Client(jobs)
    scaler = JobScaler(jobs, client, minimum=0, maximum=2, sets_per_job=1)
    scaler.update(2)
    client.busy = {"SLURMCluster-1"}
    for _ in range(3):
        clock[0] += IDLE_GRACE_S
        scaler.update(1)
    assert jobs.ended == ["SLURMCluster-0"]
