"""The trial contract: what a worker is handed (:class:`TrialTask`), what it hands back
(:class:`TrialOutcome`), what an objective knows of where it runs (:class:`TrialContext`);
the checkpoint files and where a study's files land; how a trial stops, pauses or yields; and
the named fault points the tests interrupt a trial at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.trial._checkpoint import CheckpointStore, continue_from, snapshot
    from hpsearch.trial._faults import active, fault_point
    from hpsearch.trial._layout import RunLayout
    from hpsearch.trial._stop import (
        STOP_FILE,
        YIELD_DIR,
        TrialStopped,
        ending,
        job_ending,
        request_yield,
        running,
        stop_requested,
        take_yield,
    )
    from hpsearch.trial._tracked import DistributedTrial, TrackedTrial, TrialPaused, step_reported
    from hpsearch.trial._types import OutcomeState, TrialContext, TrialOutcome, TrialTask

__all__ = [
    "STOP_FILE",
    "YIELD_DIR",
    "CheckpointStore",
    "DistributedTrial",
    "OutcomeState",
    "RunLayout",
    "TrackedTrial",
    "TrialContext",
    "TrialOutcome",
    "TrialPaused",
    "TrialStopped",
    "TrialTask",
    "active",
    "continue_from",
    "ending",
    "fault_point",
    "job_ending",
    "request_yield",
    "running",
    "snapshot",
    "step_reported",
    "stop_requested",
    "take_yield",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._checkpoint": (
            "CheckpointStore",
            "continue_from",
            "snapshot",
        ),
        "._faults": (
            "active",
            "fault_point",
        ),
        "._layout": ("RunLayout",),
        "._stop": (
            "STOP_FILE",
            "TrialStopped",
            "YIELD_DIR",
            "ending",
            "job_ending",
            "request_yield",
            "running",
            "stop_requested",
            "take_yield",
        ),
        "._tracked": (
            "DistributedTrial",
            "TrackedTrial",
            "TrialPaused",
            "step_reported",
        ),
        "._types": (
            "OutcomeState",
            "TrialContext",
            "TrialOutcome",
            "TrialTask",
        ),
    },
)
