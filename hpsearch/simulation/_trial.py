"""A trial on the simulated cluster: a benchmark's recorded learning curve, told to the study
epoch by epoch at the virtual second each epoch ends.

It keeps the runner's contract with the coordinator (:func:`hpsearch.worker._runner.
run_trial`), so the coordinator, the pruners and the schedulers cannot tell it from a real
trial: each start is counted (``hpsearch.attempt``); a step already in the study is never
reported again; the study's pruner is asked after each report, and a pruned trial's reason
is the one a real trial records; a trial pauses at the scheduler's epoch (its checkpoint
written there) and resumes from it; a continuation of population-based training starts
from its parent's epoch. Checkpoints follow ``objective.checkpoint_interval`` in virtual
seconds: a trial whose worker is lost trains again, unreported, the epochs after its last
checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch.simulation._cluster import TrialSegment
from hpsearch.tracking import tag
from hpsearch.trial import OutcomeState, TrialOutcome

if TYPE_CHECKING:
    import optuna

    from hpsearch.data.surrogates import Benchmark
    from hpsearch.simulation._cluster import SimCluster, SimFuture, SimWorker
    from hpsearch.spec import StudySpec


class TrialRunner:
    """Starts trials on the simulated cluster (see the module's docstring).

    ``startup``: virtual seconds before a trial's first epoch (its process, data, model).
    """

    def __init__(
        self,
        spec: StudySpec,
        study: optuna.Study,
        bench: Benchmark,
        *,
        instance: str,
        startup: float = 0.0,
    ) -> None:
        from hpsearch.search import storage_of

        self.spec = spec
        self.study = study
        self.storage = storage_of(study)
        self.bench = bench
        self.instance = instance
        self.startup = startup
        self.cluster: SimCluster | None = None
        self.checkpoints: dict[int, int] = {}  # trial number -> epoch of its latest checkpoint
        self.reported_at: dict[int, dict[int, float]] = {}  # trial -> epoch -> virtual time
        self._pruning = spec.search.pruner.name != "none"
        self.pooled = (
            False  # on a simulated pool: trials yield when asked (hpsearch.simulation._pool)
        )
        self._interval = spec.objective.checkpoint_interval

    def curve(self, params: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The study's metric at each epoch, and each epoch's seconds, for ``params``."""
        names = self.bench.space().keys()
        curve = self.bench.curve(
            {k: v for k, v in params.items() if k in names},
            self.instance,
            self.spec.objective.epochs,
        )
        return curve.metrics.get(self.spec.metric, curve.values), curve.epoch_s

    def start(self, future: SimFuture, worker: SimWorker) -> TrialSegment:
        """Start ``future``'s trial on ``worker`` now."""
        assert self.cluster is not None
        task = future.task
        frozen = self.storage.get_trial(task.trial_id)
        attempt = int(frozen.user_attrs.get(tag.ATTEMPT, 0)) + 1
        self.storage.set_trial_user_attr(task.trial_id, tag.ATTEMPT, attempt)
        number = task.trial_number
        start_epoch = self.checkpoints.get(number)
        if start_epoch is None:
            start_epoch = self._continued(number, task.lineage)
        segment = TrialSegment(
            future, number, worker.address, self.cluster.now, start_epoch, attempt
        )
        state = _Running(
            segment=segment,
            worker=worker,
            trial_id=task.trial_id,
            curve=self.curve(frozen.params),
            target=int(task.stop_at or self.spec.objective.epochs),
            reported=set(frozen.intermediate_values),
            last_checkpoint=self.cluster.now,
            study_dir=task.study_dir,
        )
        if start_epoch >= state.target:  # it reached its pause or its end before: no training
            self.cluster.at(self.cluster.now, lambda: self._reached(state, start_epoch))
        else:
            self._next_epoch(state, start_epoch + 1, self.cluster.now + self.startup)
        return segment

    def _continued(self, number: int, lineage: tuple[int, int] | None) -> int:
        """A continuation's first epoch: its parent's, whose checkpoint it starts from."""
        if lineage is None:
            return 0
        epoch = lineage[1]
        self.checkpoints[number] = epoch
        return epoch

    def _next_epoch(self, state: _Running, epoch: int, begins: float) -> None:
        assert self.cluster is not None
        ends = begins + state.curve[1][epoch - 1]
        self.cluster.at(ends, lambda: self._epoch_end(state, epoch))

    def _epoch_end(self, state: _Running, epoch: int) -> None:
        assert self.cluster is not None
        segment = state.segment
        if segment.end is not None:  # lost or cancelled meanwhile
            return
        segment.epoch = epoch
        value = float(state.curve[0][epoch - 1])
        now = self.cluster.now
        if epoch not in state.reported:
            self.storage.set_trial_intermediate_value(state.trial_id, epoch, value)
            state.reported.add(epoch)
            self.reported_at.setdefault(segment.number, {})[epoch] = now
        if epoch == state.target or self._checkpoint_due(state, epoch, now):
            self.checkpoints[segment.number] = epoch
            state.last_checkpoint = now
        if epoch == state.target:
            self._reached(state, epoch)
            return
        if self._pruning and self._prune(state, epoch, value):
            return
        if self.pooled and self._yields(state, epoch):
            return
        self._next_epoch(state, epoch + 1, now)

    def _yields(self, state: _Running, epoch: int) -> bool:
        """The pool asked this trial to hand its devices back: it stops here, its checkpoint
        written, to run again later from this epoch (PREEMPTED, as a real trial says)."""
        from hpsearch.trial import take_yield

        reason = take_yield(state.study_dir, state.segment.number)
        if reason is None:
            return False
        self.checkpoints[state.segment.number] = epoch
        self._end(
            state, TrialOutcome(state.segment.number, OutcomeState.PREEMPTED, reason=reason), epoch
        )
        return True

    def _checkpoint_due(self, state: _Running, epoch: int, now: float) -> bool:
        if self._interval is None:
            return False
        first = epoch == state.segment.from_epoch + 1
        return first or now - state.last_checkpoint >= self._interval

    def _prune(self, state: _Running, epoch: int, value: float) -> bool:
        from hpsearch.search import explain_prune

        frozen = self.storage.get_trial(state.trial_id)
        if not self.study.pruner.prune(self.study, frozen):
            return False
        reason = explain_prune(
            self.study,
            frozen,
            epoch,
            value,
            pruner_name=self.spec.search.pruner.name,
            metric=self.spec.metric,
        )
        for key, attr in ((tag.PRUNE_STEP, epoch), (tag.PRUNE_VALUE, value)):
            self.storage.set_trial_user_attr(state.trial_id, key, attr)
        self._end(
            state, TrialOutcome(segment_number(state), OutcomeState.PRUNED, reason=reason), epoch
        )
        return True

    def _reached(self, state: _Running, epoch: int) -> None:
        """The trial trained to its target: it pauses there (a scheduler's rung) or ends."""
        value = float(state.curve[0][epoch - 1])
        number = segment_number(state)
        if epoch < self.spec.objective.epochs:
            outcome = TrialOutcome(number, OutcomeState.PAUSED, value=value)
        else:
            if not math.isfinite(value):
                outcome = TrialOutcome(
                    number, OutcomeState.FAIL, reason=f"{self.spec.metric} is {value}"
                )
            else:
                outcome = TrialOutcome(number, OutcomeState.COMPLETE, value=value)
        self._end(state, outcome, epoch)

    def _end(self, state: _Running, outcome: TrialOutcome, epoch: int) -> None:
        assert self.cluster is not None
        segment = state.segment
        outcome.last_step = epoch
        outcome.worker = segment.worker
        outcome.duration_s = self.cluster.now - segment.start
        segment.value, segment.reason = outcome.value, outcome.reason
        self.cluster.finished(state.worker, segment, outcome)


def segment_number(state: _Running) -> int:
    return state.segment.number


@dataclass
class _Running:
    """What a running segment needs between its events."""

    segment: TrialSegment
    worker: SimWorker
    trial_id: int
    curve: tuple[tuple[float, ...], tuple[float, ...]]  # the metric, the seconds, per epoch
    target: int
    reported: set[int]
    last_checkpoint: float
    study_dir: str
