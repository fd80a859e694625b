"""The Python API: a study from a spec, run on a Dask cluster, read back afterwards.

Example:
    >>> import hpsearch
    >>> study = hpsearch.Study.from_yaml("studies/quickstart.yaml", n_trials=4)  # doctest: +SKIP
    >>> result = study.run()                                                     # doctest: +SKIP
    >>> result.best.params                                                       # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.spec import StudySpec
from hpsearch.study._result import StudyResult
from hpsearch.tracking import tag
from hpsearch.trial import RunLayout

if TYPE_CHECKING:
    import optuna
    from distributed import Client

    from hpsearch.coordinator import Progress
    from hpsearch.search import StartPlan
    from hpsearch.study._base import RunSetup

log = logging.getLogger(__name__)


class Study:
    """A hyperparameter study: a spec, where its files live, and how to run it.

    Args:
        spec: the study spec (a :class:`~hpsearch.spec.StudySpec` or a mapping in file form).
        run_dir: the run folder (default ``./runs``); the study's files go to ``RUN_DIR/NAME/``.
        client: an existing Dask ``Client`` to run the trials on (default: the spec's
            ``cluster.address``, else a local cluster of worker processes started for the run).
        warm_start: earlier studies to start from, as ``search.warm_start`` takes them.
    """

    def __init__(
        self,
        spec: StudySpec | Mapping[str, Any],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        client: Client | None = None,
        objective: Callable[..., float] | None = None,
        warm_start: Any = None,
    ) -> None:
        if warm_start is not None:
            from hpsearch.search import with_warm_start

            spec = with_warm_start(spec, warm_start)
        if objective is not None:
            # A function defined right here (a notebook cell): the spec names it, and the
            # workers get the function itself, by value.
            ref = f"{objective.__module__}:{objective.__qualname__}"
            if isinstance(spec, StudySpec):
                spec = spec.to_dict()
            spec = {**spec, "objective": {**dict(spec.get("objective") or {}), "model": ref}}
        self.spec = spec if isinstance(spec, StudySpec) else StudySpec.from_dict(spec)
        self.layout = RunLayout.of(run_dir, self.spec.name)
        self.client = client
        self.objective = objective
        # What check() found, for the spec it checked: the next run starts from it.
        self._checked: tuple[StudySpec, StartPlan] | None = None

    @classmethod
    def from_yaml(
        cls,
        path: str | os.PathLike[str],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        client: Client | None = None,
        **overrides: Any,
    ) -> Study:
        """Load a study file; keyword overrides (``n_trials=4``, ``storage=...``) win over it."""
        return cls(StudySpec.from_yaml(path, overrides=overrides), run_dir=run_dir, client=client)

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, client: Client | None = None) -> Study:
        """Re-open a study from its run folder (``RUN_DIR/NAME``), to analyse it or run it on.

        Example:
            >>> study = hpsearch.Study.load("runs/quickstart")   # doctest: +SKIP
            >>> study.best_trial.value                            # doctest: +SKIP
            0.9916
        """
        from hpsearch.exceptions import SpecError

        folder = Path(folder)
        spec_file = folder / "study.yaml"
        if not spec_file.is_file():
            raise SpecError(
                f"{folder}: not a study's run folder (it has no study.yaml; run the study first)"
            )
        spec = StudySpec.from_yaml(spec_file)
        if spec.name != folder.name:
            raise SpecError(
                f"{spec_file}: name: the study is {spec.name!r} but its folder is {folder.name!r}"
            )
        return cls(spec, run_dir=folder.parent, client=client)

    # ------------------------------------------------------------------ reading it back

    def _runs(self) -> dict[int, Any]:
        from hpsearch.study._analysis import trial_runs

        try:
            return trial_runs(self.mlflow_uri, self.experiment, self.spec.name)
        except Exception as exc:  # the tracking store is not reachable: the study still answers
            log.warning("MLflow runs not read (%s: %s)", type(exc).__name__, exc)
            return {}

    @property
    def best_trial(self) -> Any:
        """The best complete trial: ``number``, ``value``, ``params``, ``run_id`` (MLflow),
        or ``None``."""
        from hpsearch.study._analysis import best_trial

        return best_trial(self.optuna_study(), metric=self.spec.metric, runs=self._runs())

    def trials_dataframe(self) -> Any:
        """A pandas DataFrame, one row per trial: state, value, duration, worker, devices,
        MLflow run id, the reason it was pruned or failed, and ``params_*`` columns."""
        from hpsearch.study._analysis import trials_dataframe

        return trials_dataframe(
            self.optuna_study(),
            runs=self._runs(),
            metrics=self.spec.metrics if self.spec.is_multi_objective else (),
        )

    def pareto_front(self) -> list[Any]:
        """Several objectives: the Pareto-front trials (Optuna's ``best_trials``), best first
        by the first metric; each with ``number``, ``values`` (by metric), ``params`` and
        ``run_id``. Empty for a single-objective study."""
        from hpsearch.study._analysis import pareto_front

        if not self.spec.is_multi_objective:
            return []
        return pareto_front(self.optuna_study(), metrics=self.spec.metrics, runs=self._runs())

    def plot_pareto_front(self) -> Any:
        """The trials by their objectives, the Pareto front in its own colour (one plot for
        two objectives, every pair for more)."""
        from hpsearch.study._analysis import plot_pareto_front

        if not self.spec.is_multi_objective:
            from hpsearch.exceptions import SpecError

            raise SpecError(
                f"{self.spec.name}: the study has one objective ({self.spec.metric}); a Pareto "
                "front needs objective.metrics"
            )
        return plot_pareto_front(self.optuna_study(), metrics=self.spec.metrics)

    def plot_history(self) -> Any:
        """The optimization history (a matplotlib figure; shown inline in Jupyter)."""
        from hpsearch.study._analysis import plot_history

        return plot_history(self.optuna_study(), metric=self.spec.metric)

    def plot_intermediate_values(self) -> Any:
        """Learning curves of every trial, complete and pruned in different colours."""
        from hpsearch.study._analysis import plot_intermediate_values

        return plot_intermediate_values(self.optuna_study(), metric=self.spec.metric)

    def plot_importances(self) -> Any:
        """Hyperparameter importances (fANOVA over the complete trials)."""
        from hpsearch.study._analysis import plot_importances

        return plot_importances(self.optuna_study(), metric=self.spec.metric)

    def plot_parallel_coordinate(self) -> Any:
        """Parameters and value of every complete trial, as lines across parallel axes."""
        from hpsearch.study._analysis import plot_parallel_coordinate

        return plot_parallel_coordinate(self.optuna_study(), metric=self.spec.metric)

    def plot_lineage(self) -> Any:
        """A population-based study's trials over epochs, each continuation linked to the
        trial it continued from."""
        from hpsearch.search.schedulers import plot_lineage

        return plot_lineage(self.optuna_study(), metric=self.spec.metric)

    def plot_param_schedule(self) -> Any:
        """The best trial's hyperparameters along its line of ancestors, epoch by epoch."""
        from hpsearch.search.schedulers import plot_param_schedule

        return plot_param_schedule(self.optuna_study(), metric=self.spec.metric)

    def param_schedule(self) -> list[Any]:
        """The best trial's line: ``Segment(trial, first_epoch, last_epoch, params)`` from the
        first trial of the population to it (one segment for a trial that continued none)."""
        from hpsearch.search import best_complete_trial
        from hpsearch.search.schedulers import ancestry

        study = self.optuna_study()
        best = best_complete_trial(study)
        return [] if best is None else ancestry(study.get_trials(deepcopy=False), best.number)

    def report(self) -> list[Path]:
        """Write the plots (PNG, and one interactive HTML page) to ``RUN_DIR/NAME/report/`` and
        log them as artifacts of the study's MLflow run; return the files."""
        from hpsearch.study._analysis import write_report
        from hpsearch.tracking import get_client

        files = write_report(
            self.optuna_study(),
            self.layout.study_dir / "report",
            metric=self.spec.metric,
            metrics=self.spec.metrics,
        )
        client = get_client(self.mlflow_uri)
        exp = client.get_experiment_by_name(self.experiment)
        parents = (
            []
            if exp is None
            else client.search_runs(
                [exp.experiment_id],
                filter_string=tag.tag_filter(tag.STUDY, self.spec.name)
                + " and "
                + tag.tag_filter(tag.ROLE, tag.ROLE_STUDY),
            )
        )
        for run in parents[:1]:
            for path in files:
                client.log_artifact(run.info.run_id, str(path), artifact_path="report")
        return files

    # ------------------------------------------------------------------ where things are

    @property
    def storage_url(self) -> str:
        """The Optuna storage, with ``${VAR}`` taken from the environment (never logged as is)."""
        from hpsearch.storage import expand_env

        return (
            expand_env(self.spec.storage, field=self._field("storage"))
            if self.spec.storage
            else self.layout.default_storage_url
        )

    def _field(self, name: str) -> str:
        """A field as errors name it: with the study file in front when there is one."""
        return f"{self.spec.source}: {name}" if self.spec.source else name

    @property
    def mlflow_uri(self) -> str:
        from hpsearch.storage import expand_env

        if self.spec.tracking.mlflow_uri:
            return expand_env(
                self.spec.tracking.mlflow_uri, field=self._field("tracking.mlflow_uri")
            )
        return os.environ.get("MLFLOW_TRACKING_URI") or self.layout.default_mlflow_uri

    @property
    def experiment(self) -> str:
        return self.spec.tracking.experiment or self.spec.name

    @property
    def search_paths(self) -> list[str]:
        paths = [os.getcwd()]
        if self.spec.source is not None:
            paths.append(str(Path(self.spec.source).resolve().parent))
        return paths

    def optuna_study(self) -> optuna.Study:
        """The Optuna study in its storage (it must exist)."""
        import optuna

        from hpsearch.storage import open_storage

        return optuna.load_study(study_name=self.spec.name, storage=open_storage(self.storage_url))

    def changes(self) -> list[Any]:
        """What changed in the file since the study last ran (:class:`hpsearch.spec.Change`:
        free, carried or breaking); nothing for a study that has not run."""
        from hpsearch.search import changes_of, existing

        journal = None if self.spec.storage else self.layout.journal
        return changes_of(self.spec, existing(self.storage_url, self.spec.name, journal))

    @property
    def trial_sizes(self) -> list[float]:
        """The set sizes trials may ask for (several when ``gpus_per_trial`` is searched)."""
        from hpsearch.cluster import trial_sizes

        return trial_sizes(self.spec)

    # ------------------------------------------------------------------ running

    def run(
        self, *, on_progress: Callable[[Progress], None] | None = None, progress: bool = True
    ) -> StudyResult:
        """Run the study until ``search.n_trials`` trials have ended (resuming it if it exists).

        Shows its progress (a bar in Jupyter, a live display in a terminal) unless
        ``progress=False`` or an ``on_progress`` callback takes the updates instead.
        """
        if on_progress is None and progress:
            from hpsearch.coordinator import auto_display

            with auto_display(self.spec.name) as display:
                return self._run(on_progress=display)
        return self._run(on_progress=on_progress)

    def check(self) -> list[str]:
        """Check that the study can run now, before anything is started or written; the lines
        worth reading first (``hpsearch run`` and ``hpsearch validate`` print them).

        Checked: the storage and tracking URLs (``${VAR}`` set), that the MLflow server
        answers and that the study can carry what changed since it last ran (both not for the
        simulated cluster, whose runs replace its study), and that each warm-start source can
        inform it. The lines: one per change (free or carried), one per
        warm-start source (what it holds). A problem raises an
        :class:`~hpsearch.exceptions.HpsearchError` (``SpecError`` for a breaking change or a
        source that cannot be used, ``TrackingError``, ``StorageError``), one line each.

        The next :meth:`run` starts from what this found instead of checking again.

        Example:
            >>> study = hpsearch.Study.from_yaml("studies/digits-cnn.yaml")  # doctest: +SKIP
            >>> study.check()                                                 # doctest: +SKIP
            ['studies/digits-cnn.yaml: search.n_trials: 12 -> 20 (free)']
        """
        from hpsearch.study._run import check_run

        plan = check_run(self._setup())
        self._checked = (self.spec, plan)
        return plan.lines(self.spec)

    def _setup(self) -> RunSetup:
        from hpsearch.study._base import RunSetup

        return RunSetup(
            self.spec,
            self.layout,
            self.storage_url,
            self.mlflow_uri,
            self.experiment,
            client=self.client,
            objective=self.objective,
            search_paths=self.search_paths,
        )

    def _run(self, *, on_progress: Callable[[Progress], None] | None) -> StudyResult:
        """Check (once: what :meth:`check` found, if it was called for this spec), then run on
        the spec's backend (:func:`hpsearch.study._run.run_study`)."""
        from hpsearch.study._run import check_run, run_study

        setup = self._setup()
        checked, self._checked = self._checked, None
        plan = checked[1] if checked is not None and checked[0] is self.spec else check_run(setup)
        return run_study(setup, plan, on_progress=on_progress)
