"""The coordinator's records of its trials: one that waits for a free set (:class:`Ready`),
and one that runs on the cluster (:class:`InFlight`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from distributed import Future


@dataclass
class Ready:
    """A trial that is in the study and waits for a free set."""

    trial_id: int
    number: int
    resume: bool
    size: float
    stop_at: int | None = None  # a scheduler's pause (search.scheduler)
    scheduled: bool = False  # a paused trial a scheduler starts again
    relative: dict[str, tuple[Any, Any]] | None = None  # see TrialTask.relative
    lineage: tuple[int, int] | None = None  # see TrialTask.lineage


@dataclass
class InFlight:
    """A trial submitted to the cluster: its future's record while it runs."""

    number: int
    trial_id: int
    submitted: float
    size: float = 1
    stop_at: int | None = None
    lineage: tuple[int, int] | None = None

    @classmethod
    def of(cls, item: Ready, *, submitted: float) -> InFlight:
        """The record of ``item``, submitted at ``submitted`` (the coordinator's clock)."""
        return cls(item.number, item.trial_id, submitted, item.size, item.stop_at, item.lineage)

    def again(self) -> Ready:
        """The trial, to run again from its checkpoint (its worker was lost, or it yielded)."""
        return Ready(
            self.trial_id,
            self.number,
            resume=True,
            size=self.size,
            stop_at=self.stop_at,
            lineage=self.lineage,
        )


#: The trials in flight by their Dask future, as the parts of the coordinator read them (the
#: loop alone adds and removes them).
InFlightView: TypeAlias = "Mapping[Future, InFlight]"
