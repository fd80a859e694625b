"""The pool's arbitration rules, on their own (no Dask, no clock): shares, leases, yields,
expiry, and fairness over time."""

from __future__ import annotations

import itertools

import pytest

from hpsearch.cluster.pool import PoolState, water_fill


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


class Sim:
    """Studies that always want more one-device trials of ``length`` seconds; a trial asked
    to yield stops at its next epoch end (each second)."""

    def __init__(self, capacity: float, length: int = 3) -> None:
        self.pool = PoolState(ttl_s=10)
        self.pool.capacity = capacity
        self.length = length
        self.running: dict[str, dict[str, int]] = {}  # study -> lease -> end time
        self.ids = itertools.count()
        self.now = 0

    def join(self, name: str, **settings) -> None:
        self.pool.join(name, self.now, **settings)
        self.running[name] = {}

    def step(self, demand: dict[str, float]) -> None:
        for name, leases in self.running.items():
            for lease, end in list(leases.items()):
                if end <= self.now:
                    self.pool.release(name, lease, self.now)
                    del leases[lease]
            answer = self.pool.heartbeat(name, self.now, demand[name], 1)
            yielding = answer["yield"]
            for lease in sorted(leases, key=leases.get, reverse=True):
                if yielding <= 0:
                    break
                self.pool.release(name, lease, self.now)  # paused at its epoch end
                del leases[lease]
                yielding -= 1
        for name in sorted(self.running, key=lambda n: -self.pool.studies[n].credit):
            while len(self.running[name]) < demand[name]:
                lease = f"{name}-{next(self.ids)}"
                if not self.pool.acquire(name, lease, 1, self.now, demand[name]):
                    break
                self.running[name][lease] = self.now + self.length
        self.now += 1

    def held(self) -> dict[str, float]:
        return {n: c.held for n, c in self.pool.studies.items()}


def test_water_fill_is_weighted_max_min() -> None:
    assert water_fill(4, [("a", 1, 9), ("b", 1, 9), ("c", 2, 9)]) == {"a": 1, "b": 1, "c": 2}
    assert water_fill(4, [("a", 1, 0.5), ("b", 1, 9), ("c", 1, 1)]) == {
        "a": 0.5,
        "b": 2.5,
        "c": 1,
    }
    assert water_fill(3, [("a", 1, 0), ("b", 2, 9)]) == {"a": 0, "b": 3}


def test_a_study_alone_borrows_the_pool_and_gives_back_to_a_newcomer() -> None:
    sim = Sim(4)
    sim.join("a")
    sim.step({"a": 8})
    assert sim.held() == {"a": 4}
    sim.join("b", weight=1)
    demand = {"a": 8, "b": 8}
    sim.step(demand)  # b waits: a is asked to yield 2, and pauses 2 trials at the epoch end
    assert sim.pool.studies["a"].preemptions >= 1
    sim.step(demand)
    assert sim.held() == {"a": 2, "b": 2}
    for _ in range(20):
        sim.step(demand)
        assert sim.held() == {"a": 2, "b": 2}


def test_weights_priority_and_caps() -> None:
    sim = Sim(8)
    sim.join("a", weight=1)
    sim.join("b", weight=3)
    demand = {"a": 8, "b": 8}
    for _ in range(5):
        sim.step(demand)
    assert sim.held() == {"a": 2, "b": 6}
    sim.join("urgent", priority="high", max_devices=5)
    demand["urgent"] = 8
    for _ in range(3):
        sim.step(demand)
    held = sim.held()
    assert held["urgent"] == 5  # its cap; the rest shared 1:3 by the others
    assert (held["a"], held["b"]) == (pytest.approx(0.75, abs=1), pytest.approx(2.25, abs=1))
    assert sum(held.values()) == 8


def test_low_priority_never_takes_from_normal() -> None:
    sim = Sim(2)
    sim.join("n")
    sim.join("low", priority="low")
    for _ in range(5):
        sim.step({"n": 2, "low": 2})
    assert sim.held() == {"n": 2, "low": 0}
    assert sim.pool.studies["n"].preemptions == 0


def test_fractional_shares_even_out_over_time() -> None:
    sim = Sim(4, length=2)
    for name in "abc":
        sim.join(name)
    demand = {name: 4 for name in "abc"}
    for _ in range(300):
        sim.step(demand)
        assert sum(sim.held().values()) == 4  # work-conserving
    used = [c.device_seconds for c in sim.pool.studies.values()]
    assert jain(used) >= 0.99, used


def test_what_nobody_wants_is_borrowed_and_a_dead_study_expires() -> None:
    sim = Sim(4)
    sim.join("a")
    sim.join("b")
    for _ in range(3):
        sim.step({"a": 1, "b": 8})
    assert sim.held() == {"a": 1, "b": 3}
    sim.running.pop("a")  # its coordinator is killed: no more heartbeats
    sim.now += 11
    sim.pool.heartbeat("b", sim.now, 8, 1)
    assert sim.pool.expire(sim.now) == ["a"]
    assert "a" not in sim.pool.studies and sim.pool.free() == 1
    sim.step({"b": 8})
    assert sim.held() == {"b": 4}


def test_leave_releases_at_once_and_status_reports() -> None:
    pool = PoolState()
    pool.capacity = 2
    pool.join("s", 0.0, weight=2.0, priority="high")
    assert pool.acquire("s", "l1", 1, 0.0, demand=1)
    assert pool.acquire("s", "l1", 1, 0.5, demand=1)  # the same lease again: still held
    status = pool.status(2.0)
    (study,) = status["studies"]
    assert (study["held"], study["weight"], study["priority"]) == (1, 2.0, "high")
    assert study["device_seconds"] == pytest.approx(2.0)
    pool.leave("s", 3.0)
    assert pool.free() == 2 and pool.status(3.0)["studies"] == []
