"""A study's trials on a Dask cluster (local worker processes, an existing scheduler or pool,
SLURM jobs, Kubernetes pods): the backend of the run path that trains for real, with the
study in its Optuna storage (reached by the workers through the storage proxy), the study's
MLflow run, and the metrics endpoint when the spec asks for one."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from hpsearch.storage import redact
from hpsearch.study._base import BackendRun, RunSetup
from hpsearch.tracking import tag

if TYPE_CHECKING:
    from hpsearch.cluster import Capacity
    from hpsearch.coordinator import Progress
    from hpsearch.metrics import StudyMetrics
    from hpsearch.search import StartPlan
    from hpsearch.storage import StorageProxy
    from hpsearch.tracking import StudyTracker

log = logging.getLogger("hpsearch.study._study")  # the logger these lines always had


class DaskRun(BackendRun):
    """One run of a study on the Dask cluster its spec names (or the client it was given)."""

    def __init__(self, setup: RunSetup) -> None:
        super().__init__(setup)
        self.status = "KILLED"  # FINISHED once the coordinator has run the budget out
        self.cluster: Any = None  # the cluster backend (hpsearch.cluster.backend_for)
        self.client: Any = None
        self.capacity: Capacity | None = None
        self.storage: Any = None
        self.tracker: StudyTracker | None = None
        self.target: Any = None
        self.proxy: StorageProxy | None = None
        self.metrics: StudyMetrics | None = None

    def check(self) -> None:
        """Workers on other machines cannot write a tracking store that is a file here; the
        tracking store opens (imports, SQLite set-up) while the cluster starts."""
        import optuna

        from hpsearch.cluster import backend_for
        from hpsearch.tracking import get_client
        from hpsearch.worker import warm

        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        spec, uri = self.setup.spec, self.setup.mlflow_uri
        self.cluster = backend_for(spec, client=self.setup.client)
        if self.cluster.remote and uri.startswith(("sqlite:", "file:")):
            from hpsearch.exceptions import TrackingError

            where = f"{spec.source}: " if spec.source else ""
            raise TrackingError(
                f"{where}tracking.mlflow_uri: workers on other machines cannot write "
                f"{uri} (a file on this machine); use an MLflow server "
                "(http://HOST:5000) or a database URL"
            )
        warm.start([lambda: get_client(uri)])

    @contextmanager
    def started(self) -> Iterator[None]:
        """The cluster up, checked to run these trials, its workers warmed."""
        from hpsearch.worker import warm

        setup = self.setup
        spec, objective = setup.spec, setup.objective
        with self.cluster as client:
            self.client = client
            self.capacity = self._capacity(client)
            warm.warm_workers(
                client,
                built_in=not spec.is_user_objective and objective is None,
                objective=spec.objective.model
                if spec.is_user_objective and objective is None
                else None,
                search_paths=setup.search_paths,
                mlflow_uri=setup.mlflow_uri,
            )
            yield

    def _capacity(self, client: Any) -> Capacity:
        """What the cluster offers, checked against the largest trial it must place."""
        from hpsearch.cluster import WORKER_WAIT_S, Capacity, capacity, check_workers, trial_sizes

        cluster, spec = self.cluster, self.setup.spec
        cap = capacity(client, wait_s=0 if cluster.may_start_empty else WORKER_WAIT_S)
        if cluster.may_start_empty and not cap.n_threads:
            # adapt: {minimum: 0}: jobs are started for the first trials.
            return Capacity(cluster.resource_key)
        cap.check(max(trial_sizes(spec)))
        if cluster.remote:  # workers started elsewhere: can they run these trials at all?
            check_workers(client, needs_torch=not spec.is_user_objective)
        return cap

    def run(self, plan: StartPlan, on_progress: Callable[[Progress], None] | None) -> None:
        self._open_study(plan)
        self._open_tracking()
        self._coordinate(on_progress)

    def _open_study(self, plan: StartPlan) -> None:
        """The study in its storage, started as ``plan`` says (the spec kept, a warm start)."""
        from hpsearch.search import start_study
        from hpsearch.storage import open_storage

        self.storage = open_storage(self.setup.storage_url)
        self.study = start_study(self.setup.spec, self.storage, plan)

    def _open_tracking(self) -> None:
        """The study's MLflow run, and the trial runs an earlier run could not write."""
        from hpsearch.tracking import StudyTracker, replay_backlog
        from hpsearch.worker import warm

        setup = self.setup
        spec, uri = setup.spec, setup.mlflow_uri
        warm.wait()  # the tracking store: MLflow is imported on one thread only
        self.tracker = StudyTracker(
            uri,
            setup.experiment,
            spec.name,
            metric=spec.metric,
            artifact_root=setup.layout.mlflow_artifacts if uri.startswith("sqlite:") else None,
        )
        self.target = self.tracker.open(
            storage_url=redact(setup.storage_url),
            tags={
                tag.SPEC_HASH: spec.spec_hash,
                tag.SAMPLER: spec.search.sampler.name,
                tag.PRUNER: spec.search.pruner.name,
                tag.N_TRIALS: spec.search.n_trials,
            },
            spec_yaml=spec.to_yaml(),
        )
        self.parent_run_id = self.target.parent_run_id
        written, _ = replay_backlog(setup.layout.tracking_backlog)
        if written:
            log.warning("wrote %d trial runs' MLflow records kept from an earlier run", written)

    def _coordinate(self, on_progress: Callable[[Progress], None] | None) -> None:
        """The coordinator, through the storage proxy, until the budget is spent; then every
        worker's MLflow writes."""
        from hpsearch.cluster.pool import join_pool
        from hpsearch.coordinator import Coordinator
        from hpsearch.storage import StorageProxy
        from hpsearch.study._end import flush_workers
        from hpsearch.tracking import ServerWatch

        setup, client, study, capacity = self.setup, self.client, self.study, self.capacity
        spec = setup.spec
        assert study is not None and capacity is not None  # opened and started
        self.proxy = StorageProxy(self.storage, host=self.cluster.proxy_host).start()
        self.metrics = self._start_metrics()
        coordinator = Coordinator(
            spec,
            study,
            client=client,
            capacity=capacity,
            proxy=self.proxy.address,
            tracking=self.target,
            study_dir=str(setup.layout.study_dir),
            search_paths=setup.search_paths,
            on_progress=on_progress,
            objective=setup.objective,
            storage_url=setup.storage_url if spec.cluster.storage_access == "direct" else None,
            metrics=self.metrics,
            scaler=self.cluster.scaler,
            lease=join_pool(client, spec),
        )
        if self.metrics is not None:
            self.metrics.watch(coordinator.figures, running=coordinator.running_numbers)
        with ServerWatch(setup.mlflow_uri):
            progress = coordinator.run()
        if self.metrics is not None:
            self.metrics.stop_polling(ended=True)  # the workers are asked no more
        self.status = "FINISHED"
        flush_workers(client, setup.layout.tracking_backlog)
        progress.tracked = time.monotonic()
        self.progress = progress

    def _start_metrics(self) -> StudyMetrics | None:
        """The study's metrics endpoint, where the spec asks for one."""
        spec = self.setup.spec
        if spec.cluster.metrics is None:
            return None
        from hpsearch.metrics import StudyMetrics

        metrics = StudyMetrics(
            spec.name,
            spec.cluster.metrics,
            study_dir=self.setup.layout.study_dir,
            client=self.client,
        ).start()
        print(f"metrics {metrics.url}", flush=True)
        return metrics

    def end(self) -> None:
        """The cluster is closed by now (local) or the trials cancelled (remote): what the
        workers could not close, this closes with the trials' true states."""
        from hpsearch.search import best_complete_trial
        from hpsearch.storage import sync_journals

        if self.proxy is not None:
            self.proxy.stop()
        sync_journals()  # the study's last appends on disk before the command returns
        if self.metrics is not None:
            self.metrics.close()
        self.best = best_complete_trial(self.study) if self.study is not None else None
        if self.tracker is not None and self.study is not None:
            self._close_tracking()

    def _close_tracking(self) -> None:
        from hpsearch.study._end import close_tracking
        from hpsearch.tracking import check_reachable

        assert self.tracker is not None and self.study is not None
        try:
            check_reachable(self.setup.mlflow_uri)
            close_tracking(self.tracker, self.study, self.best, self.status, self.setup.spec)
        except Exception as exc:  # the store is down: the next run of the study does it
            log.warning(
                "MLflow: could not record the study's end (%s: %s); the next run of this "
                "study reconciles its runs",
                type(exc).__name__,
                exc,
            )
