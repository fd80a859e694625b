"""What the coordinator keeps is bounded: nothing in it grows with the number of trials."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import dask
import distributed  # noqa: F401  (its defaults in dask's config, before any is set here)
import optuna
import pytest

from hpsearch.spec import MetricsSpec, StudySpec
from hpsearch.testing._specs import user_spec
from hpsearch.trial import TrialOutcome


def test_the_endpoint_shows_the_throughput_of_the_latest_ended_trials_only(tmp_path):
    from hpsearch.metrics import ENDED_SHOWN, StudyMetrics

    metrics = StudyMetrics("m", MetricsSpec(port=0), study_dir=tmp_path, client=None)  # type: ignore[arg-type]
    n = ENDED_SHOWN + 40
    for number in range(n):
        extra = {"samples_per_s": 100.0 + number, "epoch_s": 1.0}
        metrics.on_outcome(TrialOutcome(number, "COMPLETE", value=0.5, extra=extra))
    metrics.on_outcome(TrialOutcome(n, "COMPLETE", value=0.5))  # logged no throughput
    assert len(metrics._ended) == ENDED_SHOWN
    shown = {
        int(labels["trial"])
        for name, _, _, labels, _ in metrics.figures()
        if name == "hpsearch_trial_samples_per_second"
    }
    assert shown == set(range(n - ENDED_SHOWN, n))


def test_the_coordinator_keeps_the_latest_durations_and_no_losses_of_ended_trials():
    from hpsearch.cluster import Capacity
    from hpsearch.coordinator import RECENT_DURATIONS, Coordinator

    spec = StudySpec.from_dict(user_spec("bounded", "hpsearch.testing.objectives:trivial"))
    coordinator = Coordinator(
        spec,
        optuna.create_study(),
        client=None,  # type: ignore[arg-type]
        capacity=Capacity("SLOT", {"w": 2.0}, {"w": 2}),
        proxy=None,  # type: ignore[arg-type]
        tracking=None,  # type: ignore[arg-type]
        study_dir="",
        search_paths=[],
    )
    for number in range(5 * RECENT_DURATIONS):
        coordinator.count_outcome(
            TrialOutcome(number, "COMPLETE", value=float(number), duration_s=0.1)
        )
    assert len(coordinator.placement.durations) == RECENT_DURATIONS
    assert coordinator.placement.short_trials()
    assert coordinator.progress.complete == 5 * RECENT_DURATIONS


class _Backend:
    """A back-end whose cluster is nothing: what Dask's config says while it is open."""

    seen: dict[str, Any]

    def __init__(self) -> None:
        from hpsearch.cluster._backend import Backend

        class Probe(Backend):
            def render(self) -> str:
                return ""

            @contextlib.contextmanager
            def start(self) -> Iterator[Any]:
                probe.seen = {
                    key: dask.config.get(key)
                    for key in (
                        "distributed.admin.low-level-log-length",
                        "distributed.admin.system-monitor.log-length",
                        "distributed.diagnostics.computations.max-history",
                    )
                }
                yield object()

        probe = self
        self.backend = Probe(
            StudySpec.from_dict(user_spec("b", "hpsearch.testing.objectives:trivial"))
        )


def test_a_cluster_the_study_opens_keeps_short_debugging_logs():
    from hpsearch.cluster._backend import DASK_LOG_LENGTHS

    before = dask.config.get("distributed.admin.low-level-log-length")
    probe = _Backend()
    with probe.backend:
        pass
    assert probe.seen == DASK_LOG_LENGTHS
    assert dask.config.get("distributed.admin.low-level-log-length") == before


@pytest.mark.parametrize("value", [5000, None])
def test_a_log_length_the_user_set_is_kept(value):
    probe = _Backend()
    with dask.config.set({"distributed.admin.low-level-log-length": value}), probe.backend:
        pass
    assert probe.seen["distributed.admin.low-level-log-length"] == value
