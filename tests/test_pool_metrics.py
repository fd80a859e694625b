"""The pool's own Prometheus series, read from its arbitration state (no Dask: a state of two
studies, one of which was asked to yield). The pool's scheduler serving them over HTTP is
tested with a real pool in tests/test_pool.py."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from hpsearch.cluster.pool import PoolState
from hpsearch.cluster.pool._metrics import SERIES, expose, withdraw


class Source:
    """What the arbiter gives the collector: its state, its resource, a clock."""

    def __init__(self, state: PoolState, now: float) -> None:
        self.state = state
        self.resource = "SLOT"
        self.expired_total = 1
        self.at = now

    def now(self) -> float:
        return self.at


def two_studies() -> Source:
    """``background`` holds 3 of 4 slots when ``urgent`` (high priority, weight 3, at most 3)
    joins at t=0: asked to yield 2, it still holds 3 at t=10, and urgent 1."""
    pool = PoolState(ttl_s=60)
    pool.capacity = 4
    pool.join("background", 0.0, weight=1.0, priority="normal")
    pool.heartbeat("background", 0.0, demand=4, next_size=1)
    for lease in ("b1", "b2", "b3"):
        assert pool.acquire("background", lease, 1, 0.0, demand=4)
    pool.join("urgent", 0.0, weight=3.0, priority="high", max_devices=3)
    pool.heartbeat("urgent", 0.0, demand=3, next_size=1)  # asks background to yield 2
    assert pool.acquire("urgent", "u1", 1, 0.0, demand=3)
    return Source(pool, now=10.0)


def test_the_collector_reads_the_pool_and_each_study() -> None:
    registry = CollectorRegistry()
    collector = expose(two_studies(), registry)
    assert collector is not None

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("hpsearch_pool_devices", kind="slot") == 4
    assert value("hpsearch_pool_devices_free", kind="slot") == 0
    assert value("hpsearch_pool_studies") == 2
    assert value("hpsearch_pool_studies_expired_total") == 1
    expected = {
        "hpsearch_pool_study_devices_held": {"background": 3, "urgent": 1},
        "hpsearch_pool_study_fair_share": {"background": 1, "urgent": 3},
        "hpsearch_pool_study_devices_waiting": {"background": 1, "urgent": 2},
        "hpsearch_pool_study_devices_yielding": {"background": 2, "urgent": 0},
        "hpsearch_pool_study_weight": {"background": 1, "urgent": 3},
        "hpsearch_pool_study_max_devices": {"background": None, "urgent": 3},
        # 10 s of share minus held: background (1 - 3), urgent (3 - 1).
        "hpsearch_pool_study_credit_device_seconds": {"background": -20, "urgent": 20},
        "hpsearch_pool_study_device_seconds_total": {"background": 30, "urgent": 10},
        "hpsearch_pool_study_preemptions_total": {"background": 1, "urgent": 0},
        "hpsearch_pool_study_devices_preempted_total": {"background": 2, "urgent": 0},
    }
    for name, by_study in expected.items():
        assert {s: value(name, study=s) for s in by_study} == by_study, name
    assert value("hpsearch_pool_study_priority", study="background", priority="normal") == 1
    assert value("hpsearch_pool_study_priority", study="urgent", priority="high") == 1
    text = generate_latest(registry).decode()
    for name, (kind, _, _) in SERIES.items():
        assert f"# TYPE {name} {kind}\n" in text, name

    # A second pool in the same process is refused the names; the first one's go with it.
    assert expose(two_studies(), registry) is None
    withdraw(collector, registry)
    assert value("hpsearch_pool_studies") is None
    withdraw(collector, registry)  # twice: nothing to do


def test_a_pool_without_studies_shows_its_devices() -> None:
    source = Source(PoolState(), now=5.0)
    source.state.capacity = 2
    source.resource = "GPU"
    registry = CollectorRegistry()
    expose(source, registry)
    assert registry.get_sample_value("hpsearch_pool_devices_free", {"kind": "gpu"}) == 2
    assert registry.get_sample_value("hpsearch_pool_studies") == 0


def test_every_series_is_documented_and_the_dashboard_asks_for_known_ones() -> None:
    import json
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parent.parent / "docs"
    text = (docs / "metrics.md").read_text()
    section = text[text.index("## The pool's own series") :]
    section = section[: section.index("\n## ", 1)]
    assert set(re.findall(r"^\| `(hpsearch_\w+)`", section, re.M)) == set(SERIES)
    dashboard = json.loads((docs / "grafana-hpsearch.json").read_text())
    exprs = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    asked = set(re.findall(r"hpsearch_pool_\w+", exprs))
    studies = {  # from the studies' own endpoints (hpsearch.metrics)
        "hpsearch_pool_devices_held",
        "hpsearch_pool_fair_share",
        "hpsearch_pool_yielding",
        "hpsearch_pool_preemptions_total",
    }
    assert asked - studies <= set(SERIES)
    assert set(SERIES) - asked <= {
        "hpsearch_pool_study_weight",
        "hpsearch_pool_study_priority",
        "hpsearch_pool_study_max_devices",
        "hpsearch_pool_study_credit_device_seconds",
        "hpsearch_pool_study_devices_preempted_total",
    }
