"""What a multi-objective study gives back: values told, the front, constraints set, and
the MLflow tags and listing of the front."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hpsearch.search.pareto._fronts import constraint_values, dominates

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from hpsearch.spec import StudySpec


def is_feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0.0 for v in trial.constraints.values())


def pareto_numbers(study: optuna.Study) -> list[int]:
    """The numbers of the study's Pareto-front trials (Optuna's ``best_trials``)."""
    return sorted(t.number for t in study.best_trials)


def apply_constraints(trial: Any, spec: StudySpec, metrics: Mapping[str, float]) -> None:
    """Set the spec's constraints on ``trial`` (Optuna's ``Trial.set_constraint``) from the
    trial's metrics; nothing when the spec has none."""
    if not spec.constraints:
        return
    for key, value in constraint_values(spec.constraints, metrics).items():
        trial.set_constraint(key, value)


def objective_values(result: Any, spec: StudySpec) -> list[float]:
    """The values an objective returned, one per metric of the spec.

    Raises:
        TrialDiverged: A value is not finite.
        TypeError: The objective returned the wrong number of values.
    """
    from hpsearch.exceptions import TrialDiverged

    n = len(spec.metrics)
    if isinstance(result, (list, tuple)):
        values = list(result)
    elif n == 1:
        values = [result]
    else:
        values = []
    if len(values) != n:
        raise TypeError(
            f"the objective returned {result!r}; this study optimizes {n} metrics "
            f"({', '.join(spec.metrics)}): return a tuple of {n} numbers in that order"
        )
    out = [float(v) for v in values]
    for name, v in zip(spec.metrics, out, strict=True):
        if not math.isfinite(v):
            raise TrialDiverged(f"objective returned {name} = {v}", step=None, value=v)
    return out


def note_front(
    front: dict[int, list[float]], number: int, values: Sequence[float], directions: Sequence[str]
) -> None:
    """Add a complete trial's values to a running front (trial number -> values), dropping
    the trials it dominates; nothing when it is dominated itself."""
    if any(dominates(v, values, directions) for v in front.values()):
        return
    for other in [n for n, v in front.items() if dominates(values, v, directions)]:
        del front[other]
    front[number] = [float(v) for v in values]


def told_values(outcome: Any) -> Any:
    """What the coordinator tells Optuna for a complete trial: its values (several
    objectives) or its value."""
    return outcome.values if outcome.values is not None else outcome.value


def study_directions(spec: StudySpec) -> dict[str, Any]:
    """``optuna.create_study``'s keyword for the spec: ``direction`` for one objective (as
    before), ``directions`` for several."""
    if spec.is_multi_objective:
        return {"directions": [d.value for d in spec.directions]}
    return {"direction": spec.direction.value}


def mark_pareto_runs(tracker: Any, study: optuna.Study, metrics: Sequence[str]) -> list[int]:
    """At the end of a multi-objective study: tag every ended trial's MLflow run
    ``hpsearch.pareto`` = true / false, and list the front on the study's run (the tag
    ``hpsearch.pareto_trials`` and the artifact ``pareto_front.json``). Returns the front."""
    import json

    from mlflow.entities import RunTag

    from hpsearch.tracking import find_trial_runs, tag

    front = pareto_numbers(study)
    client = tracker.client
    target = tracker.target
    runs = find_trial_runs(client, target)
    on_front = set(front)
    for trial in study.get_trials(deepcopy=False):
        run = runs.get(trial.number)
        if run is None or not trial.state.is_finished():
            continue
        value = "true" if trial.number in on_front else "false"
        if run.data.tags.get(tag.PARETO) != value:
            client.log_batch(run.info.run_id, tags=[RunTag(tag.PARETO, value)])
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    listing = [
        {
            "number": n,
            "values": dict(zip(metrics, trials[n].values, strict=False)),
            "params": dict(trials[n].params),
            "run_id": runs[n].info.run_id if n in runs else None,
        }
        for n in front
    ]
    client.log_batch(
        target.parent_run_id,
        tags=[RunTag(tag.PARETO_TRIALS, ",".join(str(n) for n in front) or "none")],
    )
    client.log_text(target.parent_run_id, json.dumps(listing, indent=2), "pareto_front.json")
    return front


def describe_goal(spec: StudySpec) -> str:
    """``maximize val_accuracy`` or ``maximize val_accuracy, minimize params`` (with the
    constraints: ``; params <= 2e+05``)."""
    goal = ", ".join(f"{d.value} {m}" for m, d in zip(spec.metrics, spec.directions, strict=True))
    bounds = [
        f"{m} {'<=' if k == 'max' else '>='} {v:.4g}"
        for m, b in spec.constraints.items()
        for k, v in b.items()
    ]
    return goal + (f"; {', '.join(bounds)}" if bounds else "")
