"""Asynchronous successive halving by promotion (Li et al., "A System for Massively Parallel
Hyperparameter Tuning", 2020).

A trial of bracket ``b`` pauses at the rungs ``min_epochs * eta**(b + k)`` below the last
epoch. Whenever a set is free, the best paused trial that is in the top ``1/eta`` of its
rung (counting every trial that reached the rung so far, not waiting for it to fill) is
promoted to the next rung, highest rungs first; only when none can be promoted does a new
trial start. Trials never promoted end PRUNED, with their rung and the rung's cut-off.

Everything here is a pure function of the values reported at the rungs, so the state is
rebuilt from the study after a restart (:meth:`AshaScheduler.restore`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from hpsearch.search._optuna import trial_id_of
from hpsearch.search.schedulers._base import PAUSED_AT, TARGET, Adaptation, Ended, Job

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


def rung_epochs(min_epochs: int, eta: int, max_epochs: int, bracket: int = 0) -> list[int]:
    """The epochs a trial of ``bracket`` pauses at: ``min_epochs * eta**(bracket + k)`` below
    ``max_epochs``.

    >>> rung_epochs(1, 3, 27), rung_epochs(1, 3, 27, bracket=1), rung_epochs(2, 2, 10)
    ([1, 3, 9], [3, 9], [2, 4, 8])
    """
    out: list[int] = []
    epoch = min_epochs * eta**bracket
    while epoch < max_epochs:
        out.append(epoch)
        epoch *= eta
    return out


def ranked(values: Mapping[int, float], maximize: bool) -> list[int]:
    """Trial numbers of a rung, best first (ties: the earlier trial first)."""
    return sorted(values, key=lambda n: (-values[n] if maximize else values[n], n))


def promotable(
    values: Mapping[int, float], promoted: set[int], eta: int, maximize: bool
) -> list[int]:
    """The trials of a rung in its top ``len(values) // eta`` not yet promoted, best first.

    >>> promotable({0: 0.5, 1: 0.9, 2: 0.7}, set(), 3, True)
    [1]
    >>> promotable({0: 0.5, 1: 0.9, 2: 0.7}, {1}, 3, True)
    []
    """
    top = ranked(values, maximize)[: len(values) // eta]
    return [n for n in top if n not in promoted]


def cutoff(values: Mapping[int, float], eta: int, maximize: bool) -> float | None:
    """The worst value still in the top ``1/eta`` of a rung (None while it holds < eta)."""
    k = len(values) // eta
    return values[ranked(values, maximize)[k - 1]] if k else None


@dataclass
class _Bracket:
    rungs: list[int]
    # Per rung: number -> value (a float; a RungPoint with several objectives).
    values: list[dict[int, Any]] = field(default_factory=list)
    promoted: list[set[int]] = field(default_factory=list)
    # One objective, per rung: every value's rank key, sorted (best first), and those of the
    # trials that wait there to be promoted; a promotion then costs a bisection, not a sort
    # of the rung (thousands of trials on a large cluster).
    order: list[list[tuple[float, int]]] = field(default_factory=list)
    waiting: list[list[tuple[float, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = [{} for _ in self.rungs]
        self.promoted = [set() for _ in self.rungs]
        self.order = [[] for _ in self.rungs]
        self.waiting = [[] for _ in self.rungs]


class AshaScheduler:
    """Promotion-based ASHA over ``brackets`` brackets (trial ``n`` is in bracket
    ``n % brackets``)."""

    snapshots = False  # a promoted trial resumes from its own latest checkpoint

    def __init__(
        self,
        *,
        min_epochs: int,
        reduction_factor: int,
        brackets: int,
        max_epochs: int,
        maximize: bool,
        metric: str = "value",
    ) -> None:
        self.eta = reduction_factor
        self.max_epochs = max_epochs
        self.maximize = maximize
        self.metric = metric
        self.brackets = [
            _Bracket(rung_epochs(min_epochs, reduction_factor, max_epochs, b))
            for b in range(brackets)
        ]
        self.waiting: dict[int, tuple[int, int]] = {}  # number -> (trial_id, rung index)

    #: Whether a rung's values are ranked by one number (the rank keys of _Bracket are kept).
    ordered = True

    def _key(self, number: int, value: Any) -> tuple[float, int]:
        return (-value if self.maximize else value, number)

    def _bracket(self, number: int) -> _Bracket:
        return self.brackets[number % len(self.brackets)]

    # ------------------------------------------------------------------ the hooks

    def budget(self, n_trials: int) -> int:
        return n_trials

    def stop_at(self, number: int) -> int | None:
        rungs = self._bracket(number).rungs
        return rungs[0] if rungs else None

    def paused(self, number: int, trial_id: int, epoch: int, value: Any) -> None:
        bracket = self._bracket(number)
        rung = bracket.rungs.index(epoch)
        bracket.values[rung][number] = value
        self.waiting[number] = (trial_id, rung)
        if self.ordered:
            key = self._key(number, value)
            bisect.insort(bracket.order[rung], key)
            bisect.insort(bracket.waiting[rung], key)

    def ended(self, number: int, state: TrialState) -> None:
        self._unwait(number)

    def _unwait(self, number: int) -> tuple[int, int] | None:
        """It waits no more (promoted, or ended); its ``(trial_id, rung)``."""
        found = self.waiting.pop(number, None)
        if found is not None and self.ordered:
            bracket, rung = self._bracket(number), found[1]
            keys = bracket.waiting[rung]
            i = bisect.bisect_left(keys, self._key(number, bracket.values[rung][number]))
            if i < len(keys) and keys[i][1] == number:
                del keys[i]
        return found

    def next(self) -> Job | None:
        """The best promotable paused trial, from the highest rung down (bracket by bracket)."""
        for bracket in self.brackets:
            for rung in reversed(range(len(bracket.rungs))):
                number = self._best_promotable(bracket, rung)
                if number is None:
                    continue
                found = self._unwait(number)
                assert found is not None
                bracket.promoted[rung].add(number)
                stop = bracket.rungs[rung + 1] if rung + 1 < len(bracket.rungs) else None
                return Job(number, found[0], stop)
        return None

    def _best_promotable(self, bracket: _Bracket, rung: int) -> int | None:
        """The best trial waiting at ``rung`` that is in its top ``1/eta``, or None."""
        if not self.ordered:
            for number in self._promotable(bracket.values[rung], bracket.promoted[rung]):
                if self.waiting.get(number, (0, -1))[1] == rung:
                    return number
            return None
        top = len(bracket.values[rung]) // self.eta
        waiting = bracket.waiting[rung]
        # The best waiting trial is promotable if any is: it is when it ranks in the top.
        if top and waiting and bisect.bisect_left(bracket.order[rung], waiting[0]) < top:
            return waiting[0][1]
        return None

    def _promotable(self, values: Mapping[int, Any], promoted: set[int]) -> list[int]:
        """A rung's trials in its top ``1/eta`` not yet promoted, best first."""
        return promotable(values, promoted, self.eta, self.maximize)

    def _at(self, trial: FrozenTrial, epoch: int) -> Any:
        """What ``trial`` reported at ``epoch`` (None when it did not reach it)."""
        return trial.intermediate_values.get(epoch)

    def decided(self) -> list[Job]:
        return []  # promotions wait for a free set (next)

    def observe(self, number: int, reported: Callable[[], Mapping[int, float]]) -> None:
        pass  # fixed brackets learn nothing (brackets: auto does: _adaptive)

    def trial_attrs(self, number: int) -> dict[str, Any]:
        return {}

    def adaptations(self) -> list[Adaptation]:
        return []

    def closing(self, asking: bool) -> list[Ended]:
        """With no trial left to start, the paused trials that cannot be promoted end PRUNED."""
        if asking:
            return []
        out = []
        for number, (trial_id, rung) in sorted(self.waiting.items()):
            out.append(Ended(number, trial_id, TrialState.PRUNED, self.reason(number, rung)))
        self.waiting.clear()
        for bracket in self.brackets:
            bracket.waiting = [[] for _ in bracket.rungs]
        return out

    def reason(self, number: int, rung: int) -> str:
        bracket = self._bracket(number)
        values = bracket.values[rung]
        if self.ordered:  # the rung's ranking is kept: no sort
            k = len(values) // self.eta
            cut = values[bracket.order[rung][k - 1][1]] if k else None
        else:
            cut = cutoff(values, self.eta, self.maximize)
        head = (
            f"asha: paused at rung {rung} (epoch {bracket.rungs[rung]}) and never promoted: "
            f"{self.metric} {values[number]:.6g}"
        )
        if cut is None:
            return f"{head}; fewer than {self.eta} trials reached the rung (no cut-off)"
        return (
            f"{head} is not in the top 1/{self.eta} of the rung's {len(values)} trials "
            f"(cut-off {cut:.6g})"
        )

    # ------------------------------------------------------------------ restart

    def restore(self, trials: Sequence[FrozenTrial]) -> list[Job]:
        """Rebuild the rungs from the values the study holds; paused trials wait again, and
        trials that were running (their coordinator stopped) run again to their target."""
        again: list[Job] = []
        for t in trials:
            bracket = self._bracket(t.number)
            running = t.state == TrialState.RUNNING
            paused_at = t.user_attrs.get(PAUSED_AT) if running else None
            # A trial that was running goes on to its target: the first rung, or the one it
            # was promoted to. It may have reported there already (its coordinator stopped
            # before it heard of the pause): it pauses there again, to be promoted or not.
            stop = self._target(t) if running and paused_at is None else None
            for rung, epoch in enumerate(bracket.rungs):
                value = self._at(t, epoch)
                if value is None:
                    continue
                bracket.values[rung][t.number] = value
                if paused_at == epoch:
                    self.waiting[t.number] = (trial_id_of(t), rung)
                elif stop is None or epoch < stop:
                    # It went on from this rung, or ended: it cannot be promoted from it.
                    bracket.promoted[rung].add(t.number)
            if running and t.number not in self.waiting:
                again.append(Job(t.number, trial_id_of(t), stop))
        if self.ordered:
            for bracket in self.brackets:
                for rung, values in enumerate(bracket.values):
                    bracket.order[rung] = sorted(self._key(n, v) for n, v in values.items())
                    bracket.waiting[rung] = sorted(
                        self._key(n, values[n])
                        for n, (_, r) in self.waiting.items()
                        if r == rung and self._bracket(n) is bracket
                    )
        return again

    def _target(self, trial: FrozenTrial) -> int | None:
        """Where a trial that was running pauses next (None: it runs to the last epoch)."""
        target = trial.user_attrs.get(TARGET)
        if target is None:
            return self.stop_at(trial.number)
        return int(target) if int(target) < self.max_epochs else None
