"""What a backend of the run path is (:class:`BackendRun`): where a study's trials run, the
steps the one run path (:mod:`hpsearch.study._run`) asks of it, and what it leaves for the
result; and what every backend is given (:class:`RunSetup`)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from distributed import Client

    from hpsearch.coordinator import Progress
    from hpsearch.search import StartPlan
    from hpsearch.spec import StudySpec
    from hpsearch.trial import RunLayout


@dataclass(frozen=True)
class RunSetup:
    """A study as a run sees it: its spec, its files, its stores (URLs with ``${VAR}`` taken
    from the environment), and what the caller gave (a Dask client, a function objective)."""

    spec: StudySpec
    layout: RunLayout
    storage_url: str
    mlflow_uri: str
    experiment: str
    client: Client | None = None
    objective: Callable[..., float] | None = None
    search_paths: list[str] = field(default_factory=lambda: [os.getcwd()])

    @property
    def simulated(self) -> bool:
        return self.spec.cluster.backend == "simulated"


class BackendRun(ABC):
    """Where a study's trials run, for one run: the run path calls :meth:`check`, enters
    :meth:`started`, writes the run folder, calls :meth:`run`, and calls :meth:`end` whatever
    happened; then it reads :attr:`study`, :attr:`progress`, :attr:`best`,
    :attr:`parent_run_id`, :attr:`mlflow_uri` and :attr:`figures` into the result."""

    def __init__(self, setup: RunSetup) -> None:
        self.setup = setup
        self.study: optuna.Study | None = None
        self.progress: Progress | None = None
        self.best: optuna.trial.FrozenTrial | None = None
        self.parent_run_id = ""
        #: The tracking store the result names ("" where the run recorded nothing in MLflow).
        self.mlflow_uri = setup.mlflow_uri
        #: A simulated run's figures (see :class:`~hpsearch.study.StudyResult`).
        self.figures: dict[str, Any] | None = None

    @abstractmethod
    def check(self) -> None:
        """What this backend needs checked before anything is started or written."""

    @abstractmethod
    def started(self) -> AbstractContextManager[Any]:
        """The backend up for the run, and down after it."""

    @abstractmethod
    def run(self, plan: StartPlan, on_progress: Callable[[Progress], None] | None) -> None:
        """Open the study as ``plan`` says and run it to its budget."""

    @abstractmethod
    def end(self) -> None:
        """After :meth:`started` is left, whether the run finished or not: close what it
        opened, and set :attr:`best`."""
