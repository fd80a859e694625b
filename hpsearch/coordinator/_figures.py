"""The coordinator's own series on the study's metrics endpoint: the trials by state, the
queue, the best value, the device sets and devices busy and idle, the pool share.

:class:`~hpsearch.metrics.StudyMetrics` asks for them at each scrape, from its server's thread
(:meth:`Coordinator.figures <hpsearch.coordinator.Coordinator.figures>`): the metrics room
knows nothing of the coordinator.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from hpsearch.metrics import HELP, Sample

if TYPE_CHECKING:
    from hpsearch.coordinator._flight import InFlight
    from hpsearch.coordinator._placement import Placement
    from hpsearch.coordinator._progress import Progress
    from hpsearch.coordinator._scheduling import Scheduling
    from hpsearch.coordinator._share import PoolShare


def copy_in_flight(in_flight: Mapping[Any, InFlight]) -> list[InFlight]:
    """The trials in flight, copied from another thread than the coordinator's (a change
    while copying is retried)."""
    for _ in range(5):
        try:
            return list(in_flight.values())
        except RuntimeError:  # changed size during the copy
            continue
    return []


def coordinator_figures(
    p: Progress,
    *,
    queued: int,
    flying: list[InFlight],
    placement: Placement,
    share: PoolShare,
    scheduling: Scheduling | None = None,
) -> Iterator[Sample]:
    """The coordinator's samples, as :meth:`hpsearch.metrics.StudyMetrics.figures` yields them:
    from its progress ``p``, the number of trials ``queued``, those ``flying``, its
    ``placement``, its pool ``share`` and its ``scheduling`` (asha's estimate)."""
    for state, n in (
        ("complete", p.complete),
        ("pruned", p.pruned),
        ("failed", p.failed),
        ("running", p.running),
    ):
        yield "hpsearch_trials", "gauge", HELP["trials"], {"state": state}, n
    yield "hpsearch_trials_budget", "gauge", HELP["budget"], {}, p.n_trials
    yield "hpsearch_trials_queued", "gauge", HELP["queued"], {}, queued
    if p.best_value is not None and math.isfinite(p.best_value):
        yield "hpsearch_best_value", "gauge", HELP["best"], {}, p.best_value
        yield "hpsearch_best_trial", "gauge", HELP["best_trial"], {}, p.best_number or 0
    n_busy = len(flying)
    yield "hpsearch_device_sets", "gauge", HELP["sets"], {"state": "busy"}, n_busy
    n_idle = max(0, placement.max_concurrent - n_busy)
    yield "hpsearch_device_sets", "gauge", HELP["sets"], {"state": "idle"}, n_idle
    cap = placement.capacity
    if cap.key is not None:
        used = sum(f.size for f in flying)
        labels = {"kind": cap.key.lower()}
        for state, devices in (("busy", used), ("idle", max(0.0, cap.total - used))):
            yield "hpsearch_devices", "gauge", HELP["devices"], {"state": state, **labels}, devices
    yield from share.figures()
    if scheduling is not None:
        yield from scheduling.figures()
