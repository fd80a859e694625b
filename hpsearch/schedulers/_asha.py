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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch._optuna import trial_id_of
from hpsearch.schedulers._base import PAUSED_AT, TARGET, Ended, Job

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

    def __post_init__(self) -> None:
        self.values = [{} for _ in self.rungs]
        self.promoted = [set() for _ in self.rungs]


class AshaScheduler:
    """Promotion-based ASHA over ``brackets`` brackets (trial ``n`` is in bracket
    ``n % brackets``)."""

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

    def ended(self, number: int, state: str) -> None:
        self.waiting.pop(number, None)

    def next(self) -> Job | None:
        """The best promotable paused trial, from the highest rung down (bracket by bracket)."""
        for bracket in self.brackets:
            for rung in reversed(range(len(bracket.rungs))):
                for number in self._promotable(bracket.values[rung], bracket.promoted[rung]):
                    if self.waiting.get(number, (0, -1))[1] != rung:
                        continue
                    trial_id, _ = self.waiting.pop(number)
                    bracket.promoted[rung].add(number)
                    stop = bracket.rungs[rung + 1] if rung + 1 < len(bracket.rungs) else None
                    return Job(number, trial_id, stop)
        return None

    def _promotable(self, values: Mapping[int, Any], promoted: set[int]) -> list[int]:
        """A rung's trials in its top ``1/eta`` not yet promoted, best first."""
        return promotable(values, promoted, self.eta, self.maximize)

    def _at(self, trial: FrozenTrial, epoch: int) -> Any:
        """What ``trial`` reported at ``epoch`` (None when it did not reach it)."""
        return trial.intermediate_values.get(epoch)

    def decided(self) -> list[Job]:
        return []  # promotions wait for a free set (next)

    def closing(self, asking: bool) -> list[Ended]:
        """With no trial left to start, the paused trials that cannot be promoted end PRUNED."""
        if asking:
            return []
        out = []
        for number, (trial_id, rung) in sorted(self.waiting.items()):
            out.append(Ended(number, trial_id, "PRUNED", self.reason(number, rung)))
        self.waiting.clear()
        return out

    def reason(self, number: int, rung: int) -> str:
        bracket = self._bracket(number)
        values = bracket.values[rung]
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
        from optuna.trial import TrialState

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
        return again

    def _target(self, trial: FrozenTrial) -> int | None:
        """Where a trial that was running pauses next (None: it runs to the last epoch)."""
        target = trial.user_attrs.get(TARGET)
        if target is None:
            return self.stop_at(trial.number)
        return int(target) if int(target) < self.max_epochs else None
