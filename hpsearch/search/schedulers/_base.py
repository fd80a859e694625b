"""What the coordinator asks of a scheduler, and the names it keeps in the study."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from optuna.trial import TrialState

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

#: User attribute of a trial that waits, paused, at this epoch (null once it runs again).
PAUSED_AT = "hpsearch.paused_at"
#: User attribute: the epoch a trial runs to before it pauses (the last epoch: it completes).
TARGET = "hpsearch.target_epoch"
#: User attribute: how many times a scheduler started the trial again after a pause (its
#: starts that were neither worker losses nor interruptions).
RESUMES = "hpsearch.scheduled_starts"
#: User attributes of a trial that continues another one's checkpoint (population-based).
PARENT_TRIAL = "parent_trial"
FROM_EPOCH = "from_epoch"


def lineage_of(attrs: Mapping[str, Any]) -> tuple[int, int] | None:
    """The trial and epoch whose checkpoint a continuation starts from, from its user
    attributes (None: it continues no other trial)."""
    if attrs.get(PARENT_TRIAL) is None:
        return None
    return int(attrs[PARENT_TRIAL]), int(attrs[FROM_EPOCH])


@dataclass
class Ended:
    """A paused trial the scheduler ends, and why."""

    number: int
    trial_id: int
    state: TrialState  # PRUNED (never promoted, or replaced) or COMPLETE
    reason: str
    value: float | None = None


@dataclass
class Job:
    """A trial the scheduler wants run: a paused one resumed (``trial_id`` set), or a new one
    continuing ``copy_from``'s checkpoint with ``params`` (``trial_id`` None), which
    ``replaces`` a paused trial that ends when it is created."""

    number: int | None
    trial_id: int | None
    stop_at: int | None  # the epoch to pause at; None runs the trial to its last epoch
    params: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    copy_from: int | None = None
    replaces: Ended | None = None


@dataclass
class Adaptation:
    """A new estimate: its ``line`` (what was measured, from how many trials, what changed),
    the ``estimate`` to keep in the study, and whether the spread of new trials ``changed``."""

    line: str
    estimate: dict[str, Any]
    changed: bool


class Scheduler(Protocol):
    #: Whether a trial's pause keeps a snapshot of its checkpoint at that epoch (for the
    #: continuations a population-based scheduler starts from it).
    snapshots: bool

    """Decides where trials pause and which paused ones run again.

    The coordinator calls :meth:`restore` once, :meth:`stop_at` for each trial the sampler
    gives, :meth:`paused` and :meth:`ended` as trials come back (then :meth:`decided`),
    :meth:`next` whenever a set is free, and :meth:`closing` (repeatedly) once nothing is
    left in flight.
    """

    def budget(self, n_trials: int) -> int:
        """How many trials the sampler should give in all."""

    def restore(self, trials: Sequence[FrozenTrial]) -> list[Job]:
        """Rebuild the state from the study; the trials an earlier coordinator left running."""

    def stop_at(self, number: int) -> int | None:
        """Where a new trial pauses first."""

    def paused(self, number: int, trial_id: int, epoch: int, value: Any) -> None:
        """A trial paused at ``epoch`` with ``value`` (its report: a float, or a
        :class:`~hpsearch.search.schedulers.RungPoint` with several objectives)."""

    def ended(self, number: int, state: TrialState) -> None:
        """A trial ended (COMPLETE, PRUNED or FAIL)."""

    def next(self) -> Job | None:
        """A trial to run now, or None."""

    def decided(self) -> list[Job]:
        """The trials decided since the last call, to queue at once (population-based
        training decides a whole interval when its last member pauses)."""

    def closing(self, asking: bool) -> list[Ended]:
        """Nothing is in flight (and nothing is left to ask unless ``asking``): paused trials
        that end now."""

    def observe(self, number: int, reported: Callable[[], Mapping[int, float]]) -> None:
        """A trial paused or ended; ``reported()`` reads its values at every epoch from the
        study (a storage read: called only when the scheduler learns from them)."""

    def trial_attrs(self, number: int) -> dict[str, Any]:
        """User attributes to record on a new trial when it is first submitted."""

    def adaptations(self) -> list[Adaptation]:
        """What the scheduler measured and decided since the last call (``brackets: auto``)."""
