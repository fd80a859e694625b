"""The coordinator's side of a scheduler (``search.scheduler``): the hooks that hand it the
trials that pause and end, and queue what it decides (promotions, continuations)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from optuna.trial import TrialState

from hpsearch.coordinator._flight import InFlight, Ready
from hpsearch.metrics import HELP, Sample
from hpsearch.search import trial_id_of
from hpsearch.search.schedulers import (
    DECISIONS,
    ESTIMATE,
    PARENT_TRIAL,
    PAUSED_AT,
    RESUMES,
    TARGET,
    Ended,
    Job,
    RungPoint,
    adaptation_tags,
    build_scheduler,
    lineage_of,
)
from hpsearch.tracking import tag_study_run
from hpsearch.trial import OutcomeState, TrialOutcome

if TYPE_CHECKING:
    import optuna
    from distributed import Future
    from optuna.storages import BaseStorage

    from hpsearch.coordinator._progress import Progress
    from hpsearch.search.schedulers import Scheduler
    from hpsearch.spec import StudySpec
    from hpsearch.tracking import TrackingTarget

# The scheduler's decisions (brackets: auto): a logger of their own, kept when a simulation
# quiets the coordinator's.
log = logging.getLogger("hpsearch.search.schedulers")
#: The decisions of ``brackets: auto`` the study keeps (the latest).
KEPT_DECISIONS = 50


class Host(Protocol):
    """What the scheduling part needs of the coordinator that runs it."""

    def set_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """Set a trial's user attributes (those not None)."""

    def tell(self, info: InFlight, outcome: TrialOutcome) -> None:
        """End a trial in the study as ``outcome`` says."""

    def count_outcome(self, outcome: TrialOutcome) -> None:
        """Count an ended trial in the progress (and the metrics)."""

    def queue(self, item: Ready) -> None:
        """Put a trial at the end of the queue of those waiting for a set."""


class Scheduling:
    """What the coordinator does for its scheduler: asha's pauses and promotions, pbt's
    population exploiting its best. Every hook does nothing without a scheduler
    (:attr:`active`).

    ``storage``: the study's; ``size_of``: the devices a trial of these parameters needs;
    ``progress``: the coordinator's (a paused trial is its latest news); ``host``: the
    coordinator's own calls (:class:`Host`); ``tracking``: the study's MLflow run, tagged
    with each decision as it is made.
    """

    def __init__(
        self,
        spec: StudySpec,
        study: optuna.Study,
        *,
        storage: BaseStorage,
        distributions: Any,
        size_of: Callable[[dict[str, Any]], float],
        progress: Progress,
        host: Host,
        tracking: TrackingTarget | None = None,
    ) -> None:
        self.spec = spec
        self.study = study
        self.storage = storage
        self.distributions = distributions
        self.size_of = size_of
        self.progress = progress
        self.host = host
        self.tracking = tracking  # the study's MLflow run (None on the simulated cluster)
        # asha: pauses and promotions; pbt: a population exploiting its best (else None)
        self.scheduler: Scheduler | None = build_scheduler(
            spec, params_of=lambda trial_id: storage.get_trial(trial_id).params
        )
        # brackets: auto: the latest estimate and the decisions (also in the study's attrs)
        self.estimate: dict[str, Any] | None = None
        self.decisions: list[str] = []

    @property
    def active(self) -> bool:
        """Whether the study has a scheduler."""
        return self.scheduler is not None

    @property
    def snapshots(self) -> bool:
        """Whether a trial's pause keeps its checkpoint at that epoch (population-based)."""
        return self.scheduler is not None and self.scheduler.snapshots

    def restore(self, trials: list[optuna.trial.FrozenTrial]) -> list[Ready]:
        """The trials an earlier coordinator left running or decided to resume, from the
        study (paused trials wait for a promotion, not a rerun); what the scheduler decided
        besides is queued by :meth:`take_decided`."""
        if self.scheduler is None:
            return []
        # A trial still marked paused was decided to resume: a scheduled start.
        held = {t.number for t in trials if t.user_attrs.get(PAUSED_AT) is not None}
        self.decisions = list(self.study.user_attrs.get(DECISIONS) or [])
        again = [
            self.job(job, scheduled=job.number in held) for job in self.scheduler.restore(trials)
        ]
        self.adapted()
        return again

    def observe(self, info: InFlight) -> None:
        """Let the scheduler read what a trial that paused or ended reported (when it learns
        from it), and keep what it decided."""
        assert self.scheduler is not None
        storage, trial_id = self.storage, info.trial_id
        self.scheduler.observe(info.number, lambda: storage.get_trial(trial_id).intermediate_values)
        self.adapted()

    def adapted(self) -> None:
        """Each new estimate of the scheduler: a line of the study's log, the study's
        attributes (the estimate; the decisions that changed where new trials start) and the
        tags of its MLflow run."""
        assert self.scheduler is not None
        news = self.scheduler.adaptations()
        for item in news:
            log.info("%s", item.line)
            self.estimate = item.estimate
            self.study.set_user_attr(ESTIMATE, item.estimate)
            if item.changed or not self.decisions:
                self.decisions = [*self.decisions, item.line][-KEPT_DECISIONS:]
                self.study.set_user_attr(DECISIONS, self.decisions)
        if news and self.tracking is not None:
            tags = adaptation_tags({ESTIMATE: self.estimate, DECISIONS: self.decisions})
            tag_study_run(self.tracking, tags)

    def figures(self) -> Iterator[Sample]:
        """The estimate of ``brackets: auto`` on the study's metrics endpoint."""
        estimate = self.estimate
        if not estimate or estimate.get("legacy"):
            return
        yield "hpsearch_asha_bracket", "gauge", HELP["asha_bracket"], {}, estimate["bracket"]
        first = estimate["first_epoch"]
        yield "hpsearch_asha_first_epoch", "gauge", HELP["asha_first_epoch"], {}, first
        yield "hpsearch_asha_evidence", "gauge", HELP["asha_evidence"], {}, estimate["trials"]
        yield "hpsearch_asha_decisions", "gauge", HELP["asha_decisions"], {}, len(self.decisions)
        for rung in estimate["rungs"]:
            labels = {"epoch": str(rung["epoch"])}
            yield "hpsearch_asha_survival", "gauge", HELP["asha_survival"], labels, rung["survival"]
        passed = set(estimate.get("passed_over") or [])
        for bracket, (top, finished) in (estimate.get("finished") or {}).items():
            labels = {"bracket": bracket}
            yield "hpsearch_asha_finished", "gauge", HELP["asha_finished"], labels, finished
            yield "hpsearch_asha_finished_top", "gauge", HELP["asha_finished_top"], labels, top
            over = int(int(bracket) in passed)
            yield "hpsearch_asha_passed_over", "gauge", HELP["asha_passed_over"], labels, over

    def to_ask(self, trials: list[optuna.trial.FrozenTrial], n_trials: int) -> int:
        """The trials left for the sampler to give (a pbt study's continuations are the
        scheduler's)."""
        assert self.scheduler is not None
        asked = [t for t in trials if t.state != TrialState.WAITING]
        asked = [t for t in asked if PARENT_TRIAL not in t.user_attrs]
        return max(0, self.scheduler.budget(n_trials) - len(asked))

    def stop_at(self, number: int) -> int | None:
        """Where a new trial pauses first (None: it runs to its end)."""
        return self.scheduler.stop_at(number) if self.scheduler is not None else None

    def submitting(self, item: Ready) -> None:
        """Record in the study what a trial about to be submitted runs to (and that it no
        longer waits paused)."""
        if self.scheduler is None:
            return
        attrs: Mapping[str, Any] = {} if item.resume else self.scheduler.trial_attrs(item.number)
        target = item.stop_at or self.spec.objective.epochs
        self.host.set_attrs(item.trial_id, {TARGET: target, **attrs})
        if item.resume:
            self.storage.set_trial_user_attr(item.trial_id, PAUSED_AT, None)
        if item.scheduled:
            self.count_resume(item.trial_id)

    def job(self, job: Job, *, scheduled: bool = True) -> Ready:
        """The trial of a job; ``scheduled`` when it is a paused trial started again (not a
        trial a stopped coordinator left running)."""
        if job.trial_id is None:
            return self.continuation(job)
        assert job.number is not None
        frozen = self.storage.get_trial(job.trial_id)
        return Ready(
            job.trial_id,
            job.number,
            True,
            self.size_of(frozen.params),
            job.stop_at,
            scheduled=scheduled,
            lineage=lineage_of(frozen.user_attrs),
        )

    def count_resume(self, trial_id: int) -> None:
        """One more start after a pause: the trial's starts minus these (and its
        interruptions) count its lost workers (see WorkerLosses.losses_of)."""
        attrs = self.storage.get_trial(trial_id).user_attrs
        self.storage.set_trial_user_attr(trial_id, RESUMES, int(attrs.get(RESUMES, 0)) + 1)

    def continuation(self, job: Job) -> Ready:
        """Create the trial that continues ``job.copy_from``'s checkpoint with ``job.params``
        (its worker copies the checkpoint in before it starts), and end the one it replaces."""
        self.study.enqueue_trial(job.params, user_attrs=job.attrs)
        trial = self.study.ask(self.distributions)
        if trial.user_attrs.get(PARENT_TRIAL) != job.copy_from:  # someone else's enqueued trial
            raise RuntimeError(f"trial {trial.number} is not the continuation of {job.copy_from}")
        if job.replaces is not None:
            self.end(job.replaces)
        return Ready(
            trial_id_of(trial),
            trial.number,
            True,
            self.size_of(trial.params),
            job.stop_at,
            lineage=lineage_of(job.attrs),
        )

    def take_decided(self) -> None:
        """Queue what the scheduler decided (continuations created at once); the study
        records each one's target, so a restarted coordinator knows it was decided."""
        if self.scheduler is None:
            return
        for job in self.scheduler.decided():
            item = self.job(job)
            self.host.set_attrs(item.trial_id, {TARGET: item.stop_at or self.spec.objective.epochs})
            self.host.queue(item)

    def promotion(self, ready: list[Ready], *, set_free: bool) -> bool:
        """Put a promoted paused trial at the head of ``ready`` (promotions go before new
        trials, and wait for a free set: ``set_free``); whether there was one."""
        if self.scheduler is None or ready or not set_free:
            return False
        job = self.scheduler.next()
        if job is None:
            return False
        ready.append(self.job(job))
        return True

    def paused(self, info: InFlight, future: Future, result: Any) -> bool:
        """Hand a paused trial to the scheduler (it stays RUNNING in the study, holding no
        set); whether it was one."""
        if self.scheduler is None:
            return False
        if not (isinstance(result, TrialOutcome) and result.state is OutcomeState.PAUSED):
            told = isinstance(result, TrialOutcome) and future.status == "finished"
            self.scheduler.ended(info.number, result.state.told if told else TrialState.FAIL)
            self.observe(info)
            self.take_decided()
            return False
        value: Any = result.value
        if result.values is not None:  # several objectives: all their values at the rung
            constraints = result.extra.get("constraints") or {}
            value = RungPoint(tuple(result.values), dict(constraints))
        assert result.last_step is not None and value is not None
        self.storage.set_trial_user_attr(info.trial_id, PAUSED_AT, result.last_step)
        self.scheduler.paused(info.number, info.trial_id, result.last_step, value)
        self.observe(info)
        self.progress.last = result
        self.take_decided()
        return True

    def end(self, end: Ended) -> None:
        """End a trial the scheduler gives up on (tell it, count it)."""
        outcome = TrialOutcome(
            end.number, OutcomeState.of(end.state), value=end.value, reason=end.reason
        )
        if end.state == TrialState.PRUNED:
            outcome.last_step = self.prune_point(end.trial_id)
        self.host.tell(InFlight(end.number, end.trial_id, 0.0), outcome)
        self.host.count_outcome(outcome)

    def prune_point(self, trial_id: int) -> int | None:
        """A paused trial the scheduler prunes: record the step it stopped at and its value
        there (``hpsearch.prune_step``, ``hpsearch.prune_value``), as every pruned trial has."""
        from hpsearch.tracking import tag

        frozen = self.storage.get_trial(trial_id)
        reported = frozen.intermediate_values
        step = frozen.user_attrs.get(PAUSED_AT)
        step = int(step) if step is not None else max(reported, default=None)
        if step is None:
            return None
        value: Any = reported.get(step)
        if value is None:  # several objectives: the step's values (see hpsearch.search.pareto)
            from hpsearch.search.pareto import step_values

            found = step_values(frozen).get(step)
            value = None if found is None else ", ".join(f"{v:.6g}" for v in found)
        self.storage.set_trial_user_attr(trial_id, tag.PRUNE_STEP, step)
        if value is not None:
            self.storage.set_trial_user_attr(trial_id, tag.PRUNE_VALUE, value)
        return step

    def close_paused(self, asking: bool) -> None:
        """Nothing in flight: the paused trials the scheduler gives up on end now."""
        if self.scheduler is None:
            return
        for end in self.scheduler.closing(asking):
            self.end(end)
        self.take_decided()
