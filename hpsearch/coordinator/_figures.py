"""The coordinator's own series on the study's metrics endpoint: the trials by state, the
queue, the best value, the device sets and devices busy and idle, the pool share.

:class:`~hpsearch.metrics.StudyMetrics` asks for them at each scrape, from its server's thread
(:meth:`Coordinator.figures <hpsearch.coordinator.Coordinator.figures>`); the metrics room
knows nothing of the coordinator.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hpsearch.metrics import HELP, Sample

if TYPE_CHECKING:
    from hpsearch.coordinator._loop import Coordinator


def _in_flight(c: Coordinator) -> list[Any]:
    """The coordinator's trials in flight (read from the server's thread: retry a change)."""
    for _ in range(5):
        try:
            return list(c.in_flight.values())
        except RuntimeError:  # changed size during the copy
            continue
    return []


def running_numbers(c: Coordinator) -> set[int]:
    """The numbers of the trials in flight."""
    return {f.number for f in _in_flight(c)}


def coordinator_figures(c: Coordinator) -> Iterator[Sample]:
    """The coordinator's samples, as :meth:`hpsearch.metrics.StudyMetrics.figures` yields them."""
    p = c.progress
    for state, n in (
        ("complete", p.complete),
        ("pruned", p.pruned),
        ("failed", p.failed),
        ("running", p.running),
    ):
        yield "hpsearch_trials", "gauge", HELP["trials"], {"state": state}, n
    yield "hpsearch_trials_budget", "gauge", HELP["budget"], {}, p.n_trials
    yield "hpsearch_trials_queued", "gauge", HELP["queued"], {}, len(c.pending)
    if p.best_value is not None and math.isfinite(p.best_value):
        yield "hpsearch_best_value", "gauge", HELP["best"], {}, p.best_value
        yield "hpsearch_best_trial", "gauge", HELP["best_trial"], {}, p.best_number or 0
    flying = _in_flight(c)
    busy = len(flying)
    yield "hpsearch_device_sets", "gauge", HELP["sets"], {"state": "busy"}, busy
    idle = max(0, c.placement.max_concurrent - busy)
    yield "hpsearch_device_sets", "gauge", HELP["sets"], {"state": "idle"}, idle
    cap = c.placement.capacity
    if cap.key is not None:
        used = sum(f.size for f in flying)
        labels = {"kind": cap.key.lower()}
        for state, n in (("busy", used), ("idle", max(0.0, cap.total - used))):
            yield "hpsearch_devices", "gauge", HELP["devices"], {"state": state, **labels}, n
    yield from c.share.figures()
