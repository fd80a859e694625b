"""Run a study on the simulated cluster: the real coordinator, sampler, pruner and scheduler,
the simulated executor and clock (:mod:`hpsearch.simulation._cluster`), and the records a
simulated run leaves (the study, a timeline, a summary)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import optuna

if TYPE_CHECKING:
    from hpsearch.coordinator import Progress
    from hpsearch.data.surrogates import Benchmark
    from hpsearch.search import StartPlan
    from hpsearch.simulation._cluster import SimCluster
    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.simulation")

#: The timeline and the summary of a simulated run, in the study's run folder.
TIMELINE = "timeline.jsonl"
SUMMARY = "simulation.json"


@dataclass
class Simulation:
    """What a simulated run did: its study (in memory), and the cluster's figures."""

    study: optuna.Study
    progress: Progress
    simulated_s: float  # virtual seconds from the first trial's start to the last one's end
    device_hours: float  # devices held by trials, in virtual hours
    worker_losses: int
    coordinator_restarts: int
    segments: list[dict[str, Any]]  # the timeline: every start of a trial, in start order
    worker_events: list[dict[str, Any]]
    wall_s: float  # the machine's seconds the simulation took
    reported_at: dict[int, dict[int, float]] = field(default_factory=dict)  # trial, epoch: when

    def summary(self) -> dict[str, Any]:
        return {
            "simulated_s": round(self.simulated_s, 6),
            "device_hours": round(self.device_hours, 6),
            "worker_losses": self.worker_losses,
            "coordinator_restarts": self.coordinator_restarts,
            "segments": len(self.segments),
            "trials": len(self.study.get_trials(deepcopy=False)),
        }

    def timeline(self) -> str:
        """The timeline as JSON lines: trial segments, then worker losses and returns (the
        same file and seed give the same bytes)."""
        lines = [json.dumps(s, sort_keys=True) for s in self.segments]
        lines += [json.dumps(e, sort_keys=True) for e in self.worker_events]
        from hpsearch.tracking import tag

        for trial in self.study.get_trials(deepcopy=False):  # how each one ended
            ended: dict[str, Any] = {"trial": trial.number, "ended": trial.state.name}
            if trial.value is not None:
                ended["value"] = trial.value
            reason = trial.user_attrs.get(tag.PRUNE_REASON)
            if reason:
                ended["reason"] = reason
            lines.append(json.dumps(ended, sort_keys=True))
        return "".join(line + "\n" for line in lines)


class _CoordinatorKilled(BaseException):
    """A coordinator restart of the simulation: raised at its virtual time, inside the
    coordinator's loop, as a crash would stop it."""


def simulate(
    spec: StudySpec,
    *,
    study_dir: str | Path,
    on_progress: Callable[[Progress], None] | None = None,
    storage: optuna.storages.BaseStorage | None = None,
    bench: Benchmark | None = None,
    plan: StartPlan | None = None,
) -> Simulation:
    """Run ``spec`` (``cluster.backend: simulated``) to its budget in virtual time.

    The study lives in ``storage`` (default: in memory; a study of the spec's name there is
    continued); ``study_dir`` is the run folder the coordinator keeps its files in;
    ``bench``: the benchmark (default: the one ``objective.model`` names); ``plan``: what
    the run starts from (:func:`hpsearch.search.plan_start`; default: found here, the
    warm-start sources looked up beside ``study_dir``).
    """
    from hpsearch.data.surrogates import benchmark_of
    from hpsearch.search import existing_in, plan_start, start_study
    from hpsearch.simulation._cluster import SimCluster
    from hpsearch.simulation._trial import TrialRunner
    from hpsearch.spec import SimulatedSpec, surrogate_instance

    started = time.perf_counter()
    sim = spec.cluster.simulated or SimulatedSpec()
    bench = bench or benchmark_of(spec.objective.model, spec.objective.dataset, spec.source)
    instance, why = surrogate_instance(bench, spec.objective.dataset)
    assert instance is not None, why  # the spec's checks said so
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = storage or optuna.storages.InMemoryStorage()
    if plan is None:
        plan = plan_start(spec, existing_in(storage, spec.name), Path(study_dir).parent)
    study = start_study(spec, storage, plan)  # the spec kept, a warm start
    # A replayed study's own start-up cost, where the file does not say.
    startup = sim.startup if sim.startup is not None else getattr(bench, "startup", lambda: 0)()
    runner = TrialRunner(spec, study, bench, instance=instance, startup=float(startup))
    cluster = SimCluster(
        workers=sim.workers,
        devices=sim.gpus_per_worker,
        seed=sim.seed,
        mtbf=sim.worker_mtbf,
        restart=sim.restart or 0.0,
        start_segment=runner.start,
    )
    runner.cluster = cluster
    Path(study_dir).mkdir(parents=True, exist_ok=True)

    def killed() -> None:
        raise _CoordinatorKilled

    for when in sim.restart_coordinator_at:
        cluster.at(float(when), killed)
    # Lost workers are in the timeline and the figures: not a warning each, by thousands.
    quiet = logging.getLogger("hpsearch.coordinator")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        progress, restarts = _coordinate(spec, study, cluster, study_dir, on_progress)
    finally:
        quiet.setLevel(level)
    segments = [s.record() for s in cluster.segments]
    ends = [s["end"] for s in segments if s["end"] is not None]
    return Simulation(
        study=study,
        progress=progress,
        simulated_s=max(ends, default=0.0),
        device_hours=cluster.device_seconds / 3600.0,
        worker_losses=cluster.losses,
        coordinator_restarts=restarts,
        segments=segments,
        worker_events=cluster.worker_events,
        wall_s=time.perf_counter() - started,
        reported_at=runner.reported_at,
    )


def coordinator_on(
    cluster: SimCluster,
    spec: StudySpec,
    study: optuna.Study,
    study_dir: str | Path,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    lease: Any = None,
) -> Any:
    """The real coordinator, on the simulated cluster as its client and clock (no storage
    proxy and no MLflow: a simulated trial reports to the study itself)."""
    from hpsearch.cluster import capacity
    from hpsearch.coordinator import Coordinator

    return Coordinator(
        spec,
        study,
        client=cast(Any, cluster),
        capacity=capacity(cast(Any, cluster)),
        proxy=cast(Any, None),
        tracking=cast(Any, None),
        study_dir=str(study_dir),
        search_paths=[],
        on_progress=on_progress,
        clock=cluster.clock,
        completions=cluster.completions,
        lease=lease,
    )


def _coordinate(
    spec: StudySpec,
    study: optuna.Study,
    cluster: SimCluster,
    study_dir: str | Path,
    on_progress: Callable[[Progress], None] | None,
) -> tuple[Progress, int]:
    """Run the coordinator on the simulated cluster, and again after each of its restarts;
    the final progress and how many restarts."""
    restarts = 0
    while True:
        coordinator = coordinator_on(cluster, spec, study, study_dir, on_progress=on_progress)
        try:
            return coordinator.run(), restarts
        except _CoordinatorKilled:
            restarts += 1
            log.info("simulated coordinator restart at %.0f s", cluster.now)


def save(simulation: Simulation, study_dir: str | Path, storage_url: str) -> None:
    """Keep a simulated run: its study in ``storage_url`` (replacing an earlier simulation of
    the same name), its timeline and its summary in ``study_dir``."""
    from hpsearch.storage import open_storage

    folder = Path(study_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TIMELINE).write_text(simulation.timeline())
    (folder / SUMMARY).write_text(json.dumps(simulation.summary(), indent=2) + "\n")
    name = simulation.study.study_name
    target = open_storage(storage_url)
    with contextlib.suppress(KeyError):  # an earlier simulation of the study, if any
        optuna.delete_study(study_name=name, storage=target)
    copy = optuna.create_study(
        study_name=name, storage=target, directions=simulation.study.directions
    )
    for key, value in simulation.study.user_attrs.items():
        copy.set_user_attr(key, value)
    copy.add_trials(simulation.study.get_trials(deepcopy=False))
