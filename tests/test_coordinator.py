"""The coordinator's rules for how many trials it keeps in flight."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from hpsearch.spec import StudySpec
from hpsearch.testing._specs import user_spec
from hpsearch.trial import TrialOutcome


def _coordinator(capacity_key: str | None = "SLOT", **search: Any) -> Any:
    from hpsearch.cluster import Capacity
    from hpsearch.coordinator import Coordinator

    raw = user_spec("queue", "hpsearch.testing.objectives:trivial", n_trials=100)
    raw["search"].update(search)
    if search.get("sampler") == "grid":  # a grid needs a finite space
        raw["space"] = {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25}}
    return Coordinator(
        StudySpec.from_dict(raw),
        optuna.create_study(),
        client=None,  # type: ignore[arg-type]
        capacity=Capacity(capacity_key, {"w0": 1.0, "w1": 1.0}, {"w0": 1, "w1": 1}),
        proxy=None,  # type: ignore[arg-type]
        tracking=None,  # type: ignore[arg-type]
        study_dir="",
        search_paths=[],
    )


def _ended(coordinator: Any, seconds: float, n: int = 5) -> None:
    for number in range(n):
        coordinator.count_outcome(TrialOutcome(number, "COMPLETE", value=1.0, duration_s=seconds))


def _fill(coordinator: Any) -> int:
    """Trials the coordinator would submit now, one after another."""
    from hpsearch.coordinator import InFlight, Ready

    submitted = 0
    while coordinator.placement.fits(Ready(submitted, submitted, resume=False, size=1)):
        coordinator.in_flight[object()] = InFlight(submitted, submitted, 0.0, 1, None)
        submitted += 1
    return submitted


def test_short_trials_queue_one_more_on_each_set():
    coordinator = _coordinator()
    assert coordinator.placement.max_concurrent == 2
    assert _fill(coordinator) == 2, "no trial has ended yet: one per set"
    coordinator.in_flight.clear()
    _ended(coordinator, 0.05)
    assert coordinator.placement.queued() == 2
    assert _fill(coordinator) == 4, "one running and one waiting on each set"
    assert coordinator.placement.running() == 2, "the waiting ones are not counted as running"


def test_long_trials_run_one_per_set():
    coordinator = _coordinator()
    _ended(coordinator, 30.0)
    assert coordinator.placement.queued() == 0
    assert _fill(coordinator) == 2


@pytest.mark.parametrize(
    ("search", "key"),
    [
        ({"max_concurrent": 2}, "SLOT"),  # the user's own limit is kept to the letter
        ({"sampler": "grid"}, "SLOT"),  # a grid would repeat more points
        ({"scheduler": "asha", "pruner": "none"}, "SLOT"),  # decisions need the latest results
        ({}, None),  # nothing holds a queued trial back from a busy worker
    ],
)
def test_no_queue_where_it_would_change_what_runs(search, key):
    coordinator = _coordinator(key, **search)
    _ended(coordinator, 0.05)
    assert coordinator.placement.queued() == 0
    assert _fill(coordinator) <= 2
