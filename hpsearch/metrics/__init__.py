"""A running study's metrics for Prometheus: the series, the endpoint that serves them, and
the same figures read back (``hpsearch status``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.metrics._endpoint import read_endpoint
    from hpsearch.metrics._study import (
        ENDED_SHOWN,
        HELP,
        NO_METRICS,
        SERIES,
        NoMetrics,
        Sample,
        StudyMetrics,
        end_trial,
        trial_figures,
    )

__all__ = [
    "ENDED_SHOWN",
    "HELP",
    "NO_METRICS",
    "SERIES",
    "NoMetrics",
    "Sample",
    "StudyMetrics",
    "end_trial",
    "read_endpoint",
    "trial_figures",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._endpoint": ("read_endpoint",),
        "._study": (
            "ENDED_SHOWN",
            "HELP",
            "NO_METRICS",
            "SERIES",
            "NoMetrics",
            "Sample",
            "StudyMetrics",
            "end_trial",
            "trial_figures",
        ),
    },
)
