"""The coordinator: the ask / submit / tell loop.

It owns the sampler (one process suggests, so concurrent trials never get duplicate
suggestions; TPE's constant liar spreads them out), keeps as many trials in flight as the
cluster has free sets, and tells Optuna how each one ended. Liveness comes from Dask: a
worker that dies makes its future fail with ``KilledWorker``; the coordinator runs the
trial again, resuming from its checkpoint, up to ``search.max_retries`` times, and then
ends it FAIL with the reason ("worker lost 3 times: ..."). Nothing waits on a timeout.

The budget is ``search.n_trials`` ended trials (complete, pruned or failed) in the study
as a whole, so running the same study again resumes it: trials an earlier coordinator left
RUNNING (killed, or interrupted by Ctrl-C: see :mod:`hpsearch.interruption`) are run again
(from their checkpoints), and only the missing trials are asked for. With a scheduler the
sampler gives what :meth:`~hpsearch.schedulers.Scheduler.budget` says (pbt: the population;
its continuations are created by the scheduler, within ``search.n_trials``).
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from hpsearch._optuna import storage_of, study_id_of, trial_id_of
from hpsearch._placement import RECENT_DURATIONS, Placement
from hpsearch.metrics import NO_METRICS, NoMetrics
from hpsearch.pareto import told_values
from hpsearch.progress import Progress
from hpsearch.schedulers import PARENT_TRIAL, PAUSED_AT, RESUMES, TARGET, build_scheduler
from hpsearch.schedulers._driver import SchedulerDriver, _InFlight, _Ready
from hpsearch.space import to_distributions
from hpsearch.tracking import tag
from hpsearch.training._runner import run_trial
from hpsearch.trial import TrialOutcome, TrialTask

if TYPE_CHECKING:
    from distributed import Client, Future

    from hpsearch.cluster import Capacity
    from hpsearch.cluster._scaling import JobScaler
    from hpsearch.metrics import StudyMetrics
    from hpsearch.spec import StudySpec
    from hpsearch.storage import ProxyAddress
    from hpsearch.tracking import TrackingTarget

log = logging.getLogger(__name__)

#: Seconds between two looks for an ended trial while jobs scale (cluster.adapt on SLURM).
SCALE_POLL_S = 0.2


class Coordinator(SchedulerDriver, Placement):
    """Runs a study's remaining trials on a Dask cluster."""

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
    ) -> None:
        self.spec = spec
        self.objective = objective
        self.storage_url = storage_url  # workers open the study themselves (storage_access: direct)
        self.study = study
        self.client = client
        self.capacity = capacity
        self.proxy = proxy
        self.tracking = tracking
        self.study_dir = study_dir
        self.search_paths = search_paths
        self.on_progress = on_progress
        self.size = spec.trial_size
        self.max_concurrent = self._max_concurrent()
        self.distributions = to_distributions(spec.space) if spec.space else None
        self.in_flight: dict[Future, _InFlight] = {}
        self.progress = Progress(spec.search.n_trials)
        self._pending: list[_Ready] = []
        # The latest trials' durations only: nothing the coordinator keeps grows with the study.
        self._durations: collections.deque[float] = collections.deque(maxlen=RECENT_DURATIONS)
        self._losses: dict[int, int] = {}  # trial number -> times its worker was lost
        self._last_loss: dict[int, str] = {}  # trial number -> why it ended after its last loss
        self._storage = storage_of(study)
        self._study_id = study_id_of(study)
        self._capacity_read = time.monotonic()
        self.sampler_done = False  # the sampler has nothing left to suggest (a finished grid)
        # asha: pauses and promotions; pbt: a population exploiting its best (else None)
        self.scheduler = build_scheduler(
            spec, params_of=lambda trial_id: self._storage.get_trial(trial_id).params
        )
        # The study's Prometheus endpoint: told of ended trials and lost workers, nothing more.
        self.metrics: NoMetrics = metrics if metrics is not None else NO_METRICS
        self.interrupted = 0  # trials left to resume by an interruption
        # cluster.adapt on SLURM: jobs follow the trials that want a set (told on each fill).
        self.scaler = scaler

    # ---------------------------------------------------------------- state

    def _count(self) -> list[optuna.trial.FrozenTrial]:
        """Recount the study's trials by state from the storage (at start and at the end)."""
        trials = self.study.get_trials(deepcopy=False)
        p = self.progress
        p.complete = sum(t.state == TrialState.COMPLETE for t in trials)
        p.pruned = sum(t.state == TrialState.PRUNED for t in trials)
        p.failed = sum(t.state == TrialState.FAIL for t in trials)
        p.running = self._running()
        for t in trials:
            if t.state == TrialState.COMPLETE and t.values is not None:
                self._note_values(t.number, t.values)
        return trials

    def _note_values(self, number: int, values: list[float]) -> None:
        """The best so far: the best value, or with several objectives the front."""
        if len(values) == 1:
            self._note_value(number, values[0])
            return
        from hpsearch.pareto import note_front

        directions = [d.name.lower() for d in self.study.directions]
        note_front(self.progress.front, number, values, directions)

    def _note_value(self, number: int, value: float) -> None:
        p = self.progress
        maximize = self.study.direction == optuna.study.StudyDirection.MAXIMIZE
        if p.best_value is None or (value > p.best_value if maximize else value < p.best_value):
            p.best_value, p.best_number = value, number

    def _count_outcome(self, outcome: TrialOutcome) -> None:
        """Update the counts from one ended trial (no storage read on the per-trial path)."""
        p = self.progress
        if outcome.duration_s:
            self._durations.append(outcome.duration_s)
        if outcome.state == "COMPLETE":
            p.complete += 1
            if outcome.values is not None:
                self._note_values(outcome.trial_number, outcome.values)
            elif outcome.value is not None:
                self._note_value(outcome.trial_number, outcome.value)
        elif outcome.state == "PRUNED":
            p.pruned += 1
        else:
            p.failed += 1
        p.running = self._running()
        p.last = outcome
        self.metrics.on_outcome(outcome)

    def _emit(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    # ---------------------------------------------------------------- submit / tell

    def _submit(self, item: _Ready) -> Future:
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
        )
        if self.scheduler is not None:
            self._set_attrs(item.trial_id, {TARGET: item.stop_at or self.spec.objective.epochs})
            if item.resume:
                self._storage.set_trial_user_attr(item.trial_id, PAUSED_AT, None)
            if item.scheduled:
                self._count_resume(item.trial_id)
        resources = {self.capacity.key: item.size} if self.capacity.key else None
        future = self.client.submit(
            run_trial,
            task,
            key=f"hpsearch-{self.study.study_name}-trial-{item.number}-{uuid.uuid4().hex[:8]}",
            resources=resources,
            pure=False,
        )
        self.in_flight[future] = _InFlight(
            item.number, item.trial_id, time.monotonic(), item.size, item.stop_at
        )
        return future

    def _ask(self) -> _Ready:
        trial = self.study.ask(self.distributions)
        stop = self.scheduler.stop_at(trial.number) if self.scheduler is not None else None
        return _Ready(
            trial_id_of(trial),
            trial.number,
            resume=False,
            size=self._size(trial.params),
            stop_at=stop,
            # Optuna's cached RDB storage writes a parameter only for a trial it has read
            # in the study's trials (KeyError otherwise), which a worker's own sampler does
            # first: a worker on the database itself draws its sample itself.
            relative=self._relative(trial) if self.storage_url is None else None,
        )

    @staticmethod
    def _relative(trial: optuna.Trial) -> dict[str, tuple[Any, Any]] | None:
        """What the sampler draws for ``trial`` jointly, beyond the parameters asked for.

        Optuna draws a trial's relative (joint) sample at its first suggest, in the process
        that holds the trial. Drawn here, once, by the study's one sampler: a worker would
        otherwise read the whole history through the proxy to draw it again, with a sampler
        of its own. (Asked with the declared space, the sample is drawn already.) A sampler
        that fails to draw it fails here only this shortcut: the worker draws it, and a
        failure there fails that trial alone, as it always did."""
        try:
            drawn = trial.relative_params
        except Exception as exc:
            log.debug("trial %d: the joint sample is left to its worker: %s", trial.number, exc)
            return None
        space = trial.relative_search_space or {}
        out = {
            name: (space[name], value)
            for name, value in drawn.items()
            if name in space and name not in trial.params
        }
        return out or None

    def _set_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        for key, value in attrs.items():
            if value is not None:
                self._storage.set_trial_user_attr(trial_id, key, value)

    def _tell(self, info: _InFlight, outcome: TrialOutcome) -> None:
        self._set_attrs(
            info.trial_id,
            {
                tag.WORKER: outcome.worker or None,
                tag.PID: outcome.pid or None,
                tag.PRUNE_REASON: outcome.reason if outcome.state == "PRUNED" else None,
                tag.FAIL_REASON: outcome.reason if outcome.state == "FAIL" else None,
            },
        )
        if outcome.state == "COMPLETE":
            self._tell_study(info.number, values=told_values(outcome))
        else:
            state = TrialState.PRUNED if outcome.state == "PRUNED" else TrialState.FAIL
            self._tell_study(info.number, state=state)

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

    @staticmethod
    def _error(future: Future, result: Any) -> BaseException | None:
        if future.status == "finished":
            return None
        exc = result[1] if isinstance(result, tuple) else result
        return exc if isinstance(exc, BaseException) else None

    def _losses_of(self, info: _InFlight) -> int:
        """How many times this trial's worker was lost: counted here, or by its starts
        (where Dask retried the task on other workers before giving up)."""
        from hpsearch.interruption import interruptions

        self._losses[info.number] = self._losses.get(info.number, 0) + 1
        try:
            attrs = self._storage.get_trial(info.trial_id).user_attrs
            starts = int(attrs.get(tag.ATTEMPT, 0)) - interruptions(attrs)
            starts -= int(attrs.get(RESUMES, 0))  # a scheduler's, after its pauses
        except Exception:
            starts = 0
        return max(self._losses[info.number], starts)

    def _retry(self, info: _InFlight, future: Future, result: Any) -> _Ready | None:
        """The trial to run again if its worker was lost and retries are left, else None."""
        from distributed import KilledWorker

        exc = self._error(future, result)
        if not isinstance(exc, KilledWorker):
            return None
        losses = self._losses_of(info)
        self.metrics.on_worker_lost(retried=losses <= self.spec.search.max_retries)
        if losses > self.spec.search.max_retries:
            self._last_loss[info.number] = (
                f"worker lost {losses} time{'s' if losses > 1 else ''}: {exc}"
            )
            return None
        log.warning(
            "trial %d: its worker was lost (%d of %d retries); "
            "it runs again, from its last checkpoint if it has one",
            info.number,
            losses,
            self.spec.search.max_retries,
        )
        return _Ready(info.trial_id, info.number, resume=True, size=info.size, stop_at=info.stop_at)

    def _outcome(self, info: _InFlight, future: Future, result: Any) -> TrialOutcome:
        if future.status == "finished":
            return result
        exc = self._error(future, result)
        if info.number in self._last_loss:
            reason = self._last_loss[info.number]
        else:
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else f"task {future.status}"
        return TrialOutcome(
            info.number,
            "FAIL",
            reason=reason,
            error_type=type(exc).__name__ if exc is not None else None,
        )

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

        from hpsearch._threads import quick_switches

        switch = quick_switches()  # the scheduler, the client and the proxy share this GIL
        try:
            return self._run()
        finally:
            sys.setswitchinterval(switch)

    def _run(self) -> Progress:
        from distributed import as_completed

        from hpsearch.interruption import clear_interrupted

        spec = self.spec.search
        deadline = None if spec.timeout is None else time.monotonic() + float(spec.timeout)
        trials = self._count()
        # Trials an earlier coordinator left running are run again first (from checkpoints).
        ready = [
            _Ready(trial_id_of(t), t.number, resume=True, size=self._size(t.params))
            for t in trials
            if t.state == TrialState.RUNNING
        ]
        to_ask = max(0, spec.n_trials - self.progress.ended - len(ready))
        clear_interrupted(self._storage, (t for t in trials if t.state == TrialState.RUNNING))
        self._pending = ready
        if self.scheduler is not None:  # paused trials wait for a promotion, not a rerun
            # A trial still marked paused was decided to resume: a scheduled start.
            held = {t.number for t in trials if t.user_attrs.get(PAUSED_AT) is not None}
            ready[:] = [
                self._job(job, scheduled=job.number in held)
                for job in self.scheduler.restore(trials)
            ]
            self._take_decided()
            # The sampler's trials (a pbt study's continuations are the scheduler's).
            asked = [t for t in trials if t.state != TrialState.WAITING]
            asked = [t for t in asked if PARENT_TRIAL not in t.user_attrs]
            to_ask = max(0, self.scheduler.budget(spec.n_trials) - len(asked))
        # Results are gathered on the client's event loop as futures finish: no round trip
        # per trial from this thread.
        finished = as_completed(with_results=True, raise_errors=False)

        def may_ask() -> bool:
            if to_ask <= 0 or self.sampler_done:
                return False
            return not (deadline is not None and time.monotonic() >= deadline)

        def fill() -> None:
            # First come, first served: a trial waits at the head until its set is free, and
            # nothing overtakes it (so a large set is never starved by small ones).
            nonlocal to_ask
            self._refresh_capacity()
            if self.scaler is not None:  # a job for each trial that runs or waits
                asking = to_ask if may_ask() else 0
                self.scaler.update(len(self.in_flight) + len(ready) + asking)
            while ready or self._promotion(ready) or may_ask():
                if not ready:
                    if len(self.in_flight) >= self.max_concurrent + self._queued():
                        break
                    ready.append(self._ask())
                    to_ask -= 1
                if not self._fits(ready[0]):
                    break
                finished.add(self._submit(ready.pop(0)))
            self.progress.running = self._running()

        def next_batch() -> list[Any]:
            if self.scaler is None:
                return finished.next_batch(block=True)
            # Jobs come and go while trials run: look at them (and use new sets) meanwhile.
            while not finished.has_ready():
                time.sleep(SCALE_POLL_S)
                fill()
            return finished.next_batch(block=False)

        self._emit()
        try:
            fill()
            while self.in_flight:
                self._emit()
                if not ready and may_ask() and self._short_trials() and self.scheduler is None:
                    ready.append(self._ask())  # ask ahead while the sets are busy
                    to_ask -= 1
                    fill()  # it may fit at once (sets of different sizes)
                    continue
                batch = next_batch()
                ended = [(self.in_flight.pop(future), future, result) for future, result in batch]
                # A trial whose worker was lost goes back to the head of the queue (it
                # resumes from its checkpoint), until it has been lost max_retries + 1 times.
                retried = [self._retry(info, future, result) for info, future, result in ended]
                ready[:0] = [item for item in retried if item is not None]
                paused = [
                    again is None and self._paused(*e)
                    for e, again in zip(ended, retried, strict=True)
                ]
                ended = [e for e, p in zip(ended, paused, strict=True) if not p]
                retried = [again for again, p in zip(retried, paused, strict=True) if not p]
                fill()
                if not self.in_flight and not ready:
                    self._close_paused(may_ask())
                    fill()
                for (info, future, result), again in zip(ended, retried, strict=True):
                    if again is not None:
                        continue
                    outcome = self._outcome(info, future, result)
                    self._tell(info, outcome)
                    self._count_outcome(outcome)
                    self._losses.pop(info.number, None)  # it ended: its losses are told
                    self._last_loss.pop(info.number, None)
            self._close_paused(asking=False)
        except BaseException:
            self.interrupt()
            raise
        self._count()
        self.progress.running = 0
        self.progress.finished = time.monotonic()
        self._emit()
        return self.progress

    def interrupt(self) -> None:
        """Stop every trial in flight (or asked and waiting) without ending it: it stays
        RUNNING in the study, marked interrupted, and resumes on the next run (see
        :mod:`hpsearch.interruption`); it is not counted as ended."""
        from hpsearch.interruption import mark_interrupted

        waiting = [item.trial_id for item in self._pending]
        waiting += [info.trial_id for info in self.in_flight.values()]
        self._pending = []
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
