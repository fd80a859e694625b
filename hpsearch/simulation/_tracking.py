"""MLflow records of a simulated study (``cluster.simulated.tracking: true``): the study's run
and one nested run per trial, as a real study leaves them, with the simulated times.

Written once the simulation has ended, in batches (a real study writes as it goes). Each
trial's run has its parameters, the metric at each reported epoch (timestamped at its
simulated time from the simulation's start), its end state and its prune reason; the study's
run is tagged ``hpsearch.simulated: true``. Running the same file again replaces them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpsearch.simulation._run import Simulation
    from hpsearch.spec import StudySpec

#: Tag of the study's run: its trials ran on the simulated cluster.
SIMULATED = "hpsearch.simulated"
_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "FINISHED", "FAIL": "FAILED"}


def record(simulation: Simulation, spec: StudySpec, uri: str, experiment: str) -> str:
    """Write the simulation's runs to the MLflow store at ``uri``; the study run's id."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from hpsearch.search.schedulers import adaptation_tags
    from hpsearch.tracking import tag

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    for old in client.search_runs(
        [experiment_id], filter_string=tag.tag_filter(tag.STUDY, spec.name), max_results=50_000
    ):
        client.delete_run(old.info.run_id)  # an earlier simulation of the study
    start_ms = int(time.time() * 1000)
    ends = {s["trial"]: s["end"] for s in simulation.segments if s["end"] is not None}
    starts: dict[int, float] = {}
    for segment in simulation.segments:
        starts.setdefault(segment["trial"], segment["start"])
    parent = client.create_run(
        experiment_id,
        start_time=start_ms,
        tags={
            tag.STUDY: spec.name,
            tag.ROLE: tag.ROLE_STUDY,
            tag.RUN_NAME: spec.name,
            tag.SPEC_HASH: spec.spec_hash,
            tag.SAMPLER: spec.search.sampler.name,
            tag.PRUNER: spec.search.pruner.name,
            SIMULATED: "true",
            **adaptation_tags(simulation.study.user_attrs),
        },
    ).info.run_id
    for trial in simulation.study.get_trials(deepcopy=False):
        at = int(starts.get(trial.number, 0.0) * 1000) + start_ms
        tags = {
            tag.PARENT_RUN_ID: parent,
            tag.STUDY: spec.name,
            tag.TRIAL_NUMBER: str(trial.number),
            tag.STATE: trial.state.name,
            tag.RUN_NAME: f"trial-{trial.number} {trial.state.name}",
        }
        reason = trial.user_attrs.get(tag.PRUNE_REASON)
        if reason:
            tags[tag.PRUNE_REASON] = str(reason)[: tag.REASON_LIMIT]
        run = client.create_run(experiment_id, start_time=at, tags=tags).info.run_id
        when = simulation.reported_at.get(trial.number, {})
        metrics = [
            Metric(spec.metric, float(v), start_ms + int(when.get(step, 0.0) * 1000), int(step))
            for step, v in sorted(trial.intermediate_values.items())
        ]
        params = [Param(k, str(v)) for k, v in trial.params.items()]
        for i in range(0, max(len(metrics), 1), 1000):
            client.log_batch(
                run,
                metrics=metrics[i : i + 1000],
                params=params if i == 0 else [],
                tags=[RunTag(k, v) for k, v in tags.items()] if i == 0 else [],
            )
        end = int(ends.get(trial.number, 0.0) * 1000) + start_ms
        client.set_terminated(run, _STATUS.get(trial.state.name, "KILLED"), end_time=end)
    client.set_terminated(
        parent, "FINISHED", end_time=start_ms + int(simulation.simulated_s * 1000)
    )
    return str(parent)
