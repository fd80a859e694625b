"""The study's counts as the coordinator keeps them
(:class:`~hpsearch.coordinator._progress.Progress`): recounted from the storage at the start
and the end, updated from each ended trial between."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from hpsearch.coordinator._progress import Progress
from hpsearch.trial import OutcomeState, TrialOutcome


class Tally:
    """Counts the study's trials by state and keeps the best so far (:attr:`progress`);
    ``on_progress`` is shown each :meth:`emit`."""

    def __init__(
        self,
        study: optuna.Study,
        n_trials: int,
        *,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.study = study
        self.on_progress = on_progress
        self.progress = Progress(n_trials)

    def recount(self, *, running: int) -> list[optuna.trial.FrozenTrial]:
        """Recount the study's trials by state from the storage (at start and at the end)."""
        trials = self.study.get_trials(deepcopy=False)
        p = self.progress
        p.complete = sum(t.state == TrialState.COMPLETE for t in trials)
        p.pruned = sum(t.state == TrialState.PRUNED for t in trials)
        p.failed = sum(t.state == TrialState.FAIL for t in trials)
        p.running = running
        for t in trials:
            if t.state == TrialState.COMPLETE and t.values is not None:
                self._note_values(t.number, t.values)
        return trials

    def _note_values(self, number: int, values: list[float]) -> None:
        """The best so far: the best value, or with several objectives the front."""
        if len(values) == 1:
            self._note_value(number, values[0])
            return
        from hpsearch.search.pareto import note_front

        directions = [d.name.lower() for d in self.study.directions]
        note_front(self.progress.front, number, values, directions)

    def _note_value(self, number: int, value: float) -> None:
        p = self.progress
        maximize = self.study.direction == optuna.study.StudyDirection.MAXIMIZE
        if p.best_value is None or (value > p.best_value if maximize else value < p.best_value):
            p.best_value, p.best_number = value, number

    def ended(self, outcome: TrialOutcome, *, running: int) -> None:
        """Update the counts from one ended trial (no storage read on the per-trial path)."""
        p = self.progress
        if outcome.state is OutcomeState.COMPLETE:
            p.complete += 1
            if outcome.values is not None:
                self._note_values(outcome.trial_number, outcome.values)
            elif outcome.value is not None:
                self._note_value(outcome.trial_number, outcome.value)
        elif outcome.state is OutcomeState.PRUNED:
            p.pruned += 1
        else:
            p.failed += 1
        p.running = running
        p.last = outcome

    def emit(self) -> None:
        """Show the progress (``on_progress``)."""
        if self.on_progress is not None:
            self.on_progress(self.progress)
