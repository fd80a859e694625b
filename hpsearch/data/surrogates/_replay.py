"""A study that really ran, as a benchmark: ``objective.model: replay`` with
``dataset: {name: replay, study: RUN_DIR/NAME}`` replays its trials' reported values and
their epochs' seconds, so that "what would asha have done with 64 GPUs?" is one simulation.

A configuration replays the recorded trial with the same parameters (the same sampler and
seed ask the same ones: a random sampler's don't depend on the results), else the nearest
recorded one (each parameter scaled to its range, on a log scale where it is searched so;
a different choice counts 1). Where a curve needs an epoch its trial never reached (it was
pruned there), the nearest trial that reached it gives the value and the seconds.

An epoch's seconds are the trial's ``epoch_s`` in MLflow (built-in models log it each
epoch), else the trial's duration divided by its epochs. :meth:`Replay.startup` is what a
trial's first epoch took to begin after its MLflow run opened (the median over trials): a
start's cost, read from the records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpsearch.data.surrogates._curve import Curve


class Replay:
    """The trials of the study in ``folder`` (``RUN_DIR/NAME``), as a benchmark."""

    name = "replay"

    def __init__(self, folder: str | Path) -> None:
        import optuna
        import yaml
        from optuna.trial import TrialState

        from hpsearch.storage import expand_env, open_storage

        self.folder = Path(folder)
        spec_file = self.folder / "study.yaml"
        if not spec_file.is_file():
            raise ValueError(f"{self.folder} is not a study's run folder (no study.yaml)")
        # The file a run leaves has its metric and direction resolved (StudySpec.to_dict).
        raw = yaml.safe_load(spec_file.read_text()) or {}
        objective, tracking = raw.get("objective") or {}, raw.get("tracking") or {}
        self.metric = str(objective.get("metric") or "value")
        self.metrics: tuple[str, ...] = (self.metric,)
        self.direction = str(objective.get("direction") or "minimize")
        self.max_epochs = int(objective.get("epochs") or 1)
        self.instances: tuple[str, ...] = (str(self.folder),)
        self._space = dict(raw.get("space") or {})
        name = str(raw.get("name") or self.folder.name)
        storage = raw.get("storage")
        url = (
            expand_env(storage, field="storage")
            if storage
            else f"journal://{self.folder / 'optuna.journal'}"
        )
        study = optuna.load_study(study_name=name, storage=open_storage(url))
        trials = [
            t
            for t in study.get_trials(deepcopy=False)
            if t.intermediate_values and t.state != TrialState.FAIL
        ]
        if not trials:
            raise ValueError(f"{self.folder}: the study has no trial with reported values")
        mlflow_uri = tracking.get("mlflow_uri") or f"sqlite:///{self.folder.parent / 'mlflow.db'}"
        experiment = tracking.get("experiment") or name
        uri = expand_env(mlflow_uri, field="tracking.mlflow_uri")
        seconds, starts = _epoch_seconds(uri, experiment, trials)
        self._trials = [
            (
                dict(t.params),
                dict(t.distributions),
                dict(t.intermediate_values),
                seconds.get(t.number) or {},
            )
            for t in trials
        ]
        self._startup = statistics.median(starts) if starts else 0.0
        finals = [v[self.max_epochs] for _, _, v, _ in self._trials if self.max_epochs in v]
        self._best = (max if self.direction == "maximize" else min)(finals or [math.nan])

    def space(self) -> dict[str, dict[str, Any]]:
        """The recorded study's space."""
        return dict(self._space)

    def startup(self) -> float:
        """Seconds a trial took from its start to its first epoch's start (the median)."""
        return self._startup

    def best(self, instance: str, metric: str | None = None) -> float:
        """The best final value the recorded study reached."""
        return self._best

    def curve(self, params: Mapping[str, Any], instance: str, epochs: int) -> Curve:
        order = sorted(range(len(self._trials)), key=lambda i: self._distance(params, i))
        values, seconds = [], []
        for epoch in range(1, epochs + 1):
            # The nearest trial that reached this epoch.
            i = next((i for i in order if epoch in self._trials[i][2]), order[0])
            _, _, reported, secs = self._trials[i]
            values.append(float(reported.get(epoch, math.nan)))
            seconds.append(max(1e-3, float(secs.get(epoch, _mean(secs)))))
        return Curve(tuple(values), tuple(seconds), {self.metric: tuple(values)})

    def _distance(self, params: Mapping[str, Any], index: int) -> float:
        recorded, distributions, _, _ = self._trials[index]
        total = 0.0
        for name, value in params.items():
            if name not in recorded:
                total += 1.0
                continue
            dist = distributions.get(name)
            low, high = getattr(dist, "low", None), getattr(dist, "high", None)
            if low is None or high is None or isinstance(value, str):
                total += 0.0 if value == recorded[name] else 1.0
                continue
            a, b, lo, hi = float(value), float(recorded[name]), float(low), float(high)
            if getattr(dist, "log", False) and lo > 0:
                a, b, lo, hi = (math.log(max(x, 1e-300)) for x in (a, b, lo, hi))
            total += ((a - b) / (hi - lo)) ** 2 if hi > lo else 0.0
        return total


def _mean(seconds: Mapping[int, float]) -> float:
    return statistics.fmean(seconds.values()) if seconds else 1.0


def _epoch_seconds(
    mlflow_uri: str, experiment_name: str, trials: list[Any]
) -> tuple[dict[int, dict[int, float]], list[float]]:
    """Each trial's seconds per epoch, and the seconds from a run's start to its first epoch
    (from MLflow where the study logged ``epoch_s``; else its duration over its epochs)."""
    found: dict[int, dict[int, float]] = {}
    starts: list[float] = []
    sqlite = mlflow_uri.removeprefix("sqlite:///")
    if sqlite != mlflow_uri and not Path(sqlite).is_file():
        mlflow_uri = ""  # no store there (a study run without MLflow): none made by reading
    try:
        if not mlflow_uri:
            raise LookupError("no MLflow store")
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=mlflow_uri)
        experiment = client.get_experiment_by_name(experiment_name)
        runs = (
            client.search_runs([experiment.experiment_id], max_results=50_000)
            if experiment is not None
            else []
        )
        for run in runs:
            number = run.data.tags.get("hpsearch.trial_number")
            if number is None:
                continue
            history = client.get_metric_history(run.info.run_id, "epoch_s")
            if not history:
                continue
            found[int(number)] = {m.step: float(m.value) for m in history}
            first = min(history, key=lambda m: m.step)
            if first.step == 1:
                starts.append(
                    max(0.0, (first.timestamp - run.info.start_time) / 1000 - first.value)
                )
    except Exception:  # no MLflow store to read: durations below
        pass
    for t in trials:
        if t.number in found or t.datetime_start is None or t.datetime_complete is None:
            continue
        steps = len(t.intermediate_values)
        per = (t.datetime_complete - t.datetime_start).total_seconds() / max(1, steps)
        found[t.number] = dict.fromkeys(t.intermediate_values, per)
    return found, starts
