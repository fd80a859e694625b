"""The coordinator's clock: the machine's, or a simulated cluster's virtual one.

The coordinator reads time for a study's timeout, a trial's start, how often it re-reads the
cluster's workers, and how long it waits between looks at a pool or at scaling jobs. A
simulated cluster (:mod:`hpsearch.simulation`) gives it a clock whose :meth:`Clock.sleep`
moves virtual time on instead of waiting, so the same loop runs a study in virtual seconds.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the coordinator asks of a clock."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""


class WallClock:
    """The machine's own clock."""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)


WALL_CLOCK: Clock = WallClock()
