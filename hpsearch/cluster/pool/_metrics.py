"""The pool's own series for Prometheus, served by the pool's Dask scheduler.

Dask's scheduler serves ``GET /metrics`` on its HTTP server (the dashboard's port) from
``prometheus_client``'s global registry (``distributed.http.scheduler.prometheus``). While the
arbiter runs, it registers a :class:`PoolCollector` there (:func:`expose`), which reads the
pool's :class:`~hpsearch.cluster.pool._fair.PoolState` at each scrape: the scrape runs on the
scheduler's event loop, where the arbiter's handlers run too, so it reads a state that no
request changes meanwhile. The arbiter takes it out again when it closes (:func:`withdraw`).

Every series is named ``hpsearch_pool_*``; the per-study ones ``hpsearch_pool_study_*`` with
the label ``study``, apart from the series each study's own endpoint serves
(:mod:`hpsearch.metrics`). docs/metrics.md lists them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from hpsearch.cluster.pool._fair import PoolState

log = logging.getLogger("hpsearch.pool")

#: name -> (type, help, labels); a counter's name ends in ``_total``.
SERIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "hpsearch_pool_devices": (
        "gauge",
        "Devices of the pool (GPUs, or CPU slots where no worker has GPUs), from its workers.",
        ("kind",),
    ),
    "hpsearch_pool_devices_free": ("gauge", "Devices of the pool no study holds.", ("kind",)),
    "hpsearch_pool_studies": ("gauge", "Studies in the pool.", ()),
    "hpsearch_pool_studies_expired_total": (
        "counter",
        "Studies dropped from the pool because their coordinator's heartbeat stopped.",
        (),
    ),
    "hpsearch_pool_study_devices_held": ("gauge", "Devices the study holds now.", ("study",)),
    "hpsearch_pool_study_fair_share": (
        "gauge",
        "The study's fair share of the pool now, in devices.",
        ("study",),
    ),
    "hpsearch_pool_study_devices_waiting": (
        "gauge",
        "Devices the study's waiting trials want beyond those it holds.",
        ("study",),
    ),
    "hpsearch_pool_study_devices_yielding": (
        "gauge",
        "Devices the pool has asked the study to hand back, which it still holds.",
        ("study",),
    ),
    "hpsearch_pool_study_weight": ("gauge", "The study's weight (share.weight).", ("study",)),
    "hpsearch_pool_study_priority": (
        "gauge",
        "The study's priority (share.priority), as a label; the value is 1.",
        ("study", "priority"),
    ),
    "hpsearch_pool_study_max_devices": (
        "gauge",
        "The most devices the study may hold at once (share.max_devices), where it has a cap.",
        ("study",),
    ),
    "hpsearch_pool_study_credit_device_seconds": (
        "gauge",
        "Device-seconds of fair share the study has had minus those it held: who borrows next.",
        ("study",),
    ),
    "hpsearch_pool_study_device_seconds_total": (
        "counter",
        "Device-seconds the study has held since it joined the pool.",
        ("study",),
    ),
    "hpsearch_pool_study_preemptions_total": (
        "counter",
        "Times the pool asked the study to hand devices back to a study with a better claim.",
        ("study",),
    ),
    "hpsearch_pool_study_devices_preempted_total": (
        "counter",
        "Devices the pool asked the study to hand back, all told.",
        ("study",),
    ),
}


class PoolSource(Protocol):
    """What the collector reads: the arbiter
    (:class:`~hpsearch.cluster.pool._extension.PoolArbiter`)."""

    state: PoolState
    resource: str  # "GPU" or "SLOT"
    expired_total: int

    def now(self) -> float:
        """The time, with the pool's size brought up to date."""
        ...


def pool_figures(source: PoolSource) -> Iterator[tuple[str, tuple[str, ...], float]]:
    """Every sample now: (series, label values, value)."""
    now = source.now()
    state = source.state
    state.account(now)
    kind = source.resource.lower()
    yield "hpsearch_pool_devices", (kind,), state.capacity
    yield "hpsearch_pool_devices_free", (kind,), state.free()
    yield "hpsearch_pool_studies", (), len(state.studies)
    yield "hpsearch_pool_studies_expired_total", (), source.expired_total
    shares = state.shares()
    for name, c in sorted(state.studies.items()):
        study = (name,)
        held = c.held
        yield "hpsearch_pool_study_devices_held", study, held
        yield "hpsearch_pool_study_fair_share", study, shares.get(name, 0.0)
        yield "hpsearch_pool_study_devices_waiting", study, max(0.0, c.demand - held)
        yield "hpsearch_pool_study_devices_yielding", study, c.yield_asked
        yield "hpsearch_pool_study_weight", study, c.weight
        yield "hpsearch_pool_study_priority", (name, c.priority), 1.0
        if c.max_devices is not None:
            yield "hpsearch_pool_study_max_devices", study, c.max_devices
        yield "hpsearch_pool_study_credit_device_seconds", study, c.credit
        yield "hpsearch_pool_study_device_seconds_total", study, c.device_seconds
        yield "hpsearch_pool_study_preemptions_total", study, c.preemptions
        yield "hpsearch_pool_study_devices_preempted_total", study, c.yield_total


def _families() -> dict[str, CounterMetricFamily | GaugeMetricFamily]:
    out: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for name, (kind, help_text, labels) in SERIES.items():
        if kind == "counter":
            out[name] = CounterMetricFamily(name[: -len("_total")], help_text, labels=labels)
        else:
            out[name] = GaugeMetricFamily(name, help_text, labels=labels)
    return out


class PoolCollector(Collector):
    """The pool's series, read from ``source`` at each scrape."""

    def __init__(self, source: PoolSource) -> None:
        self.source = source

    def describe(self) -> Iterable[Metric]:
        # The names, without reading the pool: the registry refuses a second pool's collector
        # in the same process rather than serve two pools' series under the same names.
        return list(_families().values())

    def collect(self) -> Iterable[Metric]:
        families = _families()
        try:
            for name, labels, value in pool_figures(self.source):
                families[name].add_metric(list(labels), float(value))
        except Exception:  # a scrape shows Dask's series even if the pool's fail
            log.exception("the pool's metrics could not be read")
            return []
        return list(families.values())


def expose(source: PoolSource, registry: CollectorRegistry = REGISTRY) -> PoolCollector | None:
    """Serve ``source``'s series in ``registry`` (the one Dask's ``/metrics`` serves);
    ``None`` when another pool in this process serves them already."""
    collector = PoolCollector(source)
    try:
        registry.register(collector)
    except ValueError as exc:  # another arbiter in this process (tests): it keeps the names
        log.info("the pool's metrics are served by another arbiter in this process: %s", exc)
        return None
    return collector


def withdraw(collector: PoolCollector | None, registry: CollectorRegistry = REGISTRY) -> None:
    """Stop serving what :func:`expose` started to."""
    if collector is None:
        return
    with contextlib.suppress(KeyError):  # not registered (any more)
        registry.unregister(collector)
