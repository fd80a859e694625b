"""The coordinator's loop: ask, submit, tell, with its parts (where trials go, what it does
for a scheduler, lost workers, the counts) composed in (see :mod:`hpsearch.coordinator`)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.trial import TrialState

from hpsearch.coordinator._clock import WALL_CLOCK, Clock
from hpsearch.coordinator._figures import coordinator_figures, copy_in_flight
from hpsearch.coordinator._flight import InFlight, Ready
from hpsearch.coordinator._losses import WorkerLosses
from hpsearch.coordinator._placement import Placement
from hpsearch.coordinator._progress import Progress
from hpsearch.coordinator._retire import retire_workers
from hpsearch.coordinator._scheduling import Scheduling
from hpsearch.coordinator._share import POOL_POLL_S, PoolShare
from hpsearch.coordinator._tally import Tally
from hpsearch.metrics import NO_METRICS, NoMetrics, Sample
from hpsearch.search import (
    VERSION_ATTR,
    relative_sample,
    storage_of,
    study_id_of,
    to_distributions,
    trial_id_of,
)
from hpsearch.search.pareto import told_values
from hpsearch.tracking import tag
from hpsearch.trial import OutcomeState, RunLayout, TrialOutcome, TrialTask
from hpsearch.worker import run_trial

if TYPE_CHECKING:
    from distributed import Client, Future

    from hpsearch.cluster import Capacity, JobScaler
    from hpsearch.cluster.pool import PoolLease
    from hpsearch.metrics import StudyMetrics
    from hpsearch.spec import StudySpec
    from hpsearch.storage import ProxyAddress
    from hpsearch.tracking import TrackingTarget

log = logging.getLogger("hpsearch.coordinator")
#: Seconds between two looks for an ended trial while jobs scale (cluster.adapt on SLURM).
SCALE_POLL_S = 0.2


class Coordinator:
    """Runs a study's remaining trials on a Dask cluster.

    It owns the trials in flight (:attr:`in_flight`) and those waiting for a set
    (:attr:`pending`), and composes its parts: :attr:`placement` (how many trials run, and
    whether the next one fits), :attr:`scheduling` (a scheduler's pauses, promotions and
    continuations), :attr:`losses` (lost workers and retries), :attr:`share` (its leases on a
    pool that several studies share) and :attr:`tally` (the counts).
    """

    def __init__(
        self,
        spec: StudySpec,
        study: optuna.Study,
        *,
        client: Client,
        capacity: Capacity,
        proxy: ProxyAddress,
        tracking: TrackingTarget,
        study_dir: str,
        search_paths: list[str],
        on_progress: Callable[[Progress], None] | None = None,
        objective: Callable[..., float] | None = None,
        storage_url: str | None = None,
        metrics: StudyMetrics | None = None,
        scaler: JobScaler | None = None,
        lease: PoolLease | None = None,
        clock: Clock = WALL_CLOCK,
        completions: Callable[[], Any] | None = None,
    ) -> None:
        self.spec = spec
        # The machine's clock, or a simulated cluster's virtual one (hpsearch.simulation),
        # with the cluster's own view of finished trials (Dask's as_completed by default).
        self.clock = clock
        self._completions = completions
        self.objective = objective
        self.storage_url = storage_url  # workers open the study themselves (storage_access: direct)
        self.study = study
        self.client = client
        self.proxy = proxy
        self.tracking = tracking
        self.study_dir = study_dir
        self.checkpoint_dir = str(RunLayout.of_study_dir(study_dir).checkpoints)
        self.search_paths = search_paths
        self.distributions = to_distributions(spec.space) if spec.space else None
        self.in_flight: dict[Future, InFlight] = {}
        self.pending: list[Ready] = []
        self._storage = storage_of(study)
        self._study_id = study_id_of(study)
        # The spec version the study runs under (hpsearch.search._carry): each new trial records it.
        version = study.user_attrs.get(VERSION_ATTR)
        self.spec_version = int(version) if version is not None else None
        self.sampler_done = False  # the sampler has nothing left to suggest (a finished grid)
        # A run's own (see _begin): trials left to ask, until when, those as they finish.
        self._to_ask, self._finishing = 0, cast(Any, None)
        self._deadline: float | None = None
        # The study's Prometheus endpoint: told of ended trials and lost workers, nothing more.
        self.metrics: NoMetrics = metrics if metrics is not None else NO_METRICS
        self.interrupted = 0  # trials left to resume by an interruption
        # cluster.adapt on SLURM: jobs follow the trials that want a set (told on each fill).
        self.scaler = scaler
        self.tally = Tally(study, spec.search.n_trials, on_progress=on_progress)
        self.progress = self.tally.progress
        self._compose(capacity, lease)

    def _compose(self, capacity: Capacity, lease: PoolLease | None) -> None:
        """Its parts: the scheduling, the placement, the losses and the pool share."""
        spec, study, client, clock = self.spec, self.study, self.client, self.clock
        self.scheduling = Scheduling(
            spec,
            study,
            storage=self._storage,
            distributions=self.distributions,
            size_of=lambda params: self.placement.size_of(params),
            progress=self.progress,
            host=self,
            tracking=self.tracking,
        )
        self.placement = Placement(
            spec,
            client=client,
            capacity=capacity,
            in_flight=self.in_flight,
            scaler=self.scaler,
            scheduled=self.scheduling.active,
            searched_sizes="gpus_per_trial" in (self.distributions or {}),
            clock=clock,
        )
        self.losses = WorkerLosses(
            max_retries=spec.search.max_retries, storage=self._storage, metrics=self.metrics
        )
        self.share = PoolShare(
            lease,
            spec,
            storage=self._storage,
            study_dir=self.study_dir,
            direction=study.directions[0],
        )

    # ---------------------------------------------------------------- what the parts call

    def figures(self) -> Iterator[Sample]:
        """The coordinator's series for the study's metrics endpoint (its scrape's thread)."""
        return coordinator_figures(
            self.progress,
            queued=len(self.pending),
            flying=copy_in_flight(self.in_flight),
            placement=self.placement,
            share=self.share,
            scheduling=self.scheduling,
        )

    def running_numbers(self) -> set[int]:
        """The numbers of the trials in flight (the metrics endpoint's thread asks)."""
        return {f.number for f in copy_in_flight(self.in_flight)}

    def count_outcome(self, outcome: TrialOutcome) -> None:
        """Count one ended trial: its duration, the counts, the metrics."""
        if outcome.duration_s:
            self.placement.note_duration(outcome.duration_s)
        self.tally.ended(outcome, running=self.placement.running())
        self.metrics.on_outcome(outcome)

    def queue(self, item: Ready) -> None:
        """Put a trial at the end of the queue of those waiting for a set."""
        self.pending.append(item)

    def set_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """Set a trial's user attributes (those not None)."""
        for key, value in attrs.items():
            if value is not None:
                self._storage.set_trial_user_attr(trial_id, key, value)

    def tell(self, info: InFlight, outcome: TrialOutcome) -> None:
        """End a trial in the study as ``outcome`` says (its worker, its reason)."""
        self.set_attrs(
            info.trial_id,
            {
                tag.WORKER: outcome.worker or None,
                tag.PID: outcome.pid or None,
                tag.PRUNE_REASON: outcome.reason if outcome.state is OutcomeState.PRUNED else None,
                tag.FAIL_REASON: outcome.reason if outcome.state is OutcomeState.FAIL else None,
            },
        )
        if outcome.state is OutcomeState.COMPLETE:
            self._tell_study(info.number, values=told_values(outcome))
        else:
            self._tell_study(info.number, state=outcome.state.told)

    # ---------------------------------------------------------------- ask / submit / tell

    def _submit(self, item: Ready) -> Future:
        task = TrialTask(
            study_name=self.study.study_name,
            trial_id=item.trial_id,
            trial_number=item.number,
            spec=self.spec,
            proxy=self.proxy,
            tracking=self.tracking,
            study_dir=self.study_dir,
            search_paths=self.search_paths,
            resume=item.resume,
            size=item.size,
            objective=self.objective,
            storage_url=self.storage_url,
            stop_at=item.stop_at,
            study_id=self._study_id,
            directions=list(self.study.directions),
            relative=item.relative,
            spec_version=self.spec_version,
            checkpoint_dir=self.checkpoint_dir,
            lineage=item.lineage,
            snapshot_pauses=self.scheduling.snapshots,
        )
        self.scheduling.submitting(item)
        capacity = self.placement.capacity
        resources = {capacity.key: item.size} if capacity.key else None
        future = self.client.submit(
            run_trial,
            task,
            key=f"hpsearch-{self.study.study_name}-trial-{item.number}-{uuid.uuid4().hex[:8]}",
            resources=resources,
            pure=False,
        )
        self.in_flight[future] = InFlight.of(item, submitted=self.clock.monotonic())
        return future

    def _ask(self) -> Ready:
        trial = self.study.ask(self.distributions)
        if self.spec_version is not None:
            self._storage.set_trial_user_attr(trial_id_of(trial), VERSION_ATTR, self.spec_version)
        stop = self.scheduling.stop_at(trial.number)
        return Ready(
            trial_id_of(trial),
            trial.number,
            resume=False,
            size=self.placement.size_of(trial.params),
            stop_at=stop,
            # Optuna's cached RDB storage writes a parameter only for a trial it has read
            # in the study's trials (KeyError otherwise), which a worker's own sampler does
            # first: a worker on the database itself draws its sample itself.
            relative=self._relative(trial) if self.storage_url is None else None,
        )

    #: What the sampler drew for a trial jointly (see
    #: :func:`hpsearch.search._sampling.relative_sample`).
    _relative = staticmethod(relative_sample)

    def _tell_study(self, number: int, **kwargs: Any) -> None:
        try:
            self.study.tell(number, skip_if_finished=True, **kwargs)
        except RuntimeError as exc:
            # A sampler that has run out of points (GridSampler, its grid done) calls
            # study.stop() from its after_trial hook, which Optuna allows only inside
            # study.optimize; the trial is stored by then. Here it means: ask no more.
            if "Study.stop" not in str(exc):
                raise
            self.sampler_done = True

    # ---------------------------------------------------------------- the loop

    def run(self) -> Progress:
        """Run until the budget is spent (or the timeout passes); return the final progress.

        The loop keeps every set busy: when a trial ends, the next one is submitted first, and
        only then is the ended one told; for short trials the next one is even asked while
        the others run, so the sampler's time overlaps with training instead of idling a set.
        In-flight trials always run to their end: the timeout only stops new trials from
        starting, as in Optuna.
        """
        import sys

        from hpsearch._process import quick_switches

        switch = quick_switches()  # the scheduler, the client and the proxy share this GIL
        try:
            return self._run()
        finally:
            sys.setswitchinterval(switch)
            self.share.close()

    def _run(self) -> Progress:
        self._begin()
        self.tally.emit()
        try:
            self._fill()
            while self.in_flight or self._waiting_for_pool():
                self.tally.emit()
                if self._ask_ahead():
                    continue
                self._take(self._next_batch())
            self.scheduling.close_paused(asking=False)
        except BaseException as exc:
            self.interrupt(graceful=isinstance(exc, KeyboardInterrupt))
            raise
        self.tally.recount(running=self.placement.running())
        self.progress.running = 0
        self.progress.finished = time.monotonic()
        self.tally.emit()
        return self.progress

    def _begin(self) -> None:
        """Read the study back: the trials an earlier coordinator left running run again first
        (from their checkpoints), a scheduler's paused ones wait for a promotion, and the
        sampler gives what is left of the budget."""
        from hpsearch.coordinator._interruption import clear_interrupted, clear_stop

        clear_stop(self.study_dir)  # an earlier run's Ctrl-C stopped its trials, not these
        search, placement, scheduling = self.spec.search, self.placement, self.scheduling
        timeout = search.timeout
        self._deadline = None if timeout is None else self.clock.monotonic() + float(timeout)
        trials = self.tally.recount(running=placement.running())
        running = [t for t in trials if t.state == TrialState.RUNNING]
        self.pending = [
            Ready(trial_id_of(t), t.number, resume=True, size=placement.size_of(t.params))
            for t in running
        ]
        self._to_ask = max(0, search.n_trials - self.progress.ended - len(self.pending))
        clear_interrupted(self._storage, running)
        if scheduling.active:  # paused trials wait for a promotion, not a rerun
            self.pending = scheduling.restore(trials)
            scheduling.take_decided()
            # The sampler's trials (a pbt study's continuations are the scheduler's).
            self._to_ask = scheduling.to_ask(trials, search.n_trials)
        # Results are gathered on the client's event loop as futures finish: no round trip
        # per trial from this thread.
        self._finishing = self._finished()

    def _may_ask(self) -> bool:
        """Whether the sampler is to give another trial (budget, grid and timeout left)."""
        if self._to_ask <= 0 or self.sampler_done:
            return False
        return not (self._deadline is not None and self.clock.monotonic() >= self._deadline)

    def _ask_next(self) -> None:
        self.pending.append(self._ask())
        self._to_ask -= 1

    def _fill(self) -> None:
        """Submit what fits. First come, first served: a trial waits at the head until its
        set is free, and nothing overtakes it (so a large set is never starved by small
        ones); promotions go before new trials."""
        placement, scheduling, share, ready = (
            self.placement,
            self.scheduling,
            self.share,
            self.pending,
        )
        placement.refresh_capacity()
        if self.scaler is not None:  # a job for each trial that runs or waits
            asking = self._to_ask if self._may_ask() else 0
            self.scaler.update(len(self.in_flight) + len(ready) + asking)
        share.want(self.in_flight, ready, self._to_ask if self._may_ask() else 0)
        while (
            ready or scheduling.promotion(ready, set_free=placement.set_free()) or self._may_ask()
        ):
            if not ready:
                if placement.full():
                    break
                self._ask_next()
            if not placement.fits(ready[0]) or not share.fits(ready[0]):
                break
            self._finishing.add(self._submit(ready.pop(0)))
        self.progress.running = placement.running()

    def _ask_ahead(self) -> bool:
        """Short trials: ask the next one while the sets are busy (the sampler's time
        overlaps with training); whether it did."""
        if self.pending or not self._may_ask() or self.scheduling.active:
            return False
        if not self.placement.short_trials():
            return False
        self._ask_next()
        self._fill()  # it may fit at once (sets of different sizes)
        return True

    def _next_batch(self) -> list[Any]:
        """The trials that ended, as soon as one has. Where jobs come and go while trials run,
        or a pool grants devices or wants some back, look at them meanwhile (and use new
        sets)."""
        finishing, share = self._finishing, self.share
        if self.scaler is None and not share.active:
            return list(finishing.next_batch(block=True))
        while not finishing.has_ready():
            if not self.in_flight and not self.pending and not self._may_ask():
                break
            if share.active:  # the pool's news or a trial's end cuts the wait short
                share.pause(self.clock, POOL_POLL_S, finishing.has_ready)
            else:
                self.clock.sleep(SCALE_POLL_S)
            share.give_back(self.in_flight)
            self._fill()
        return list(finishing.next_batch(block=False))

    def _waiting_for_pool(self) -> bool:
        """Trials wait for the pool's devices with none in flight."""
        return self.share.active and bool(self.pending or self._may_ask())

    def _take(self, batch: list[Any]) -> None:
        """Take the ended trials of ``batch``: the next ones are submitted first, then the
        ended ones are told."""
        ended = [(self.in_flight.pop(future), future, result) for future, result in batch]
        for info, _, _ in ended:
            self.share.ended(info)  # its devices go back to the pool first
        to_tell = self._goes_on(ended)
        # Workers going away leave before the next trial is placed, once their trials' ends
        # are read (their results go with them).
        going = {r.worker for _, r in batch if getattr(r, "retire", False)}
        retire_workers(self.client, self.clock, going)
        self._fill()
        if not self.in_flight and not self.pending:
            self.scheduling.close_paused(self._may_ask())
            self._fill()
        for info, outcome in to_tell:
            self.tell(info, outcome)
            self.count_outcome(outcome)
            self.losses.forget(info.number)  # it ended: its losses are told

    def _goes_on(self, ended: list[tuple[InFlight, Future, Any]]) -> list[tuple[InFlight, Any]]:
        """Queue the ended trials that run again; the others, with their outcomes, to tell.

        A trial whose worker was lost goes back to the head of the queue (it resumes from its
        checkpoint), until it has been lost ``max_retries + 1`` times; one that yielded its
        devices to another study waits first in line; a paused one waits for its scheduler.
        """
        to_tell, retried, preempted = [], [], []
        for info, future, result in ended:
            again = self.losses.retry(info, future, result)
            if again is not None:
                retried.append(again)
            elif self._preempted(future, result):
                preempted.append(self.share.preempted_trial(info, result.reason))
            elif not self.scheduling.paused(info, future, result):
                to_tell.append((info, self.losses.outcome(info, future, result)))
        self.pending[:0] = preempted + retried
        return to_tell

    def _finished(self) -> Any:
        """The cluster's trials as they finish, each with its result (or its error)."""
        if self._completions is not None:
            return self._completions()
        from distributed import as_completed

        return as_completed(with_results=True, raise_errors=False)

    @staticmethod
    def _preempted(future: Future, result: Any) -> bool:
        return (
            future.status == "finished"
            and isinstance(result, TrialOutcome)
            and result.state is OutcomeState.PREEMPTED
        )

    def interrupt(self, *, graceful: bool = False) -> None:
        """Stop every trial in flight (or asked and waiting) without ending it: it stays
        RUNNING in the study, marked interrupted, and resumes on the next run (see
        :mod:`hpsearch.coordinator._interruption`); it is not counted as ended. ``graceful``
        (Ctrl-C): the trials in flight first stop at their next safe point, their checkpoints
        written (those that end meanwhile are told as they ended)."""
        from hpsearch.coordinator._interruption import stop_in_flight

        waiting = [item.trial_id for item in self.pending]
        self.pending = []
        try:
            if graceful and self.in_flight:
                for info, outcome in stop_in_flight(self.in_flight, self.study_dir):
                    self.tell(info, outcome)
                    self.count_outcome(outcome)
        finally:
            self._stop(waiting + [info.trial_id for info in self.in_flight.values()])

    def _stop(self, waiting: list[int]) -> None:
        from hpsearch.coordinator._interruption import mark_interrupted

        futures = list(self.in_flight)
        self.in_flight.clear()
        self.progress.running = 0
        # Marked first: whatever happens next (a second Ctrl-C), the study says what waits.
        mark_interrupted(self._storage, waiting)
        if futures:
            try:
                self.client.cancel(futures, force=True)
            except Exception as exc:  # the cluster may already be gone
                log.debug("cancel failed: %s", exc)
        self.interrupted = len(waiting)
