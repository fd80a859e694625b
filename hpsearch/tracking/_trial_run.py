"""The worker side: one trial's MLflow child run, written in the background."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpsearch.tracking import _tags as tag
from hpsearch.tracking._client import (
    MAX_BATCH,
    RUN_STATUS,
    TrackingTarget,
    get_client,
    param_value,
)
from hpsearch.tracking._search import find_trial_runs
from hpsearch.tracking._sql_store import write_ended_run
from hpsearch.tracking._writer import writer

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: Seconds a running trial's metrics wait to be batched with the next ones (fast epochs
#: then cost one write a second, not one each); the final batch of a trial never waits.
BATCH_INTERVAL = 1.0


class TrialRun:
    """The MLflow child run of one trial, written in the background.

    Calls return at once; the writes happen in order on the process's writer thread, metrics
    coalesced into batches. A trial that runs again (a retry, a resumed study) finds its run
    by tag and continues it instead of opening a second one, skipping the (metric, step)
    pairs the run already holds.

    Everything not yet written is plain data (metrics, params, tags, artifacts, the final
    state), so when the store stays unreachable it can be saved to disk
    (:func:`~hpsearch.tracking.spool`) and written later
    (:func:`~hpsearch.tracking.replay_backlog`); writing a record twice changes nothing.
    """

    def __init__(
        self,
        target: TrackingTarget,
        trial_number: int,
        *,
        tags: Mapping[str, Any],
        resume: bool,
        _submit: bool = True,
    ) -> None:
        self.target = target
        self.trial_number = trial_number
        self.run_id: str | None = None
        self._lock = threading.Lock()
        self._metrics: list[Any] = []
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._artifacts: list[tuple[str, Any, str]] = []  # ("text" | "image", payload, file)
        self._final: str | None = None
        self._closed = False
        self._spooled = False
        self._scheduled = False
        self._logged_params: dict[str, str] = {}
        self._finishing = threading.Event()
        # The first write waits like a metric batch (or until the trial ends): a trial shorter
        # than BATCH_INTERVAL creates its run once, already ended (see _open).
        self._last_drain = time.monotonic()
        self._held: set[tuple[str, int]] = set()  # (metric, step) pairs the run already has
        self._inflight: tuple[list[Any], dict[str, str], dict[str, str]] = ([], {}, {})
        self._resume = resume
        self._create_failed = False
        self._whole = True  # may the run be written whole, in one transaction (see _write_whole)
        self._start_ms = int(time.time() * 1000)
        self._end_ms: int | None = None
        self._start_tags = {
            tag.PARENT_RUN_ID: target.parent_run_id,
            tag.STUDY: target.study_name,
            tag.TRIAL_NUMBER: str(trial_number),
            tag.STATE: "RUNNING",
            **{k: str(v) for k, v in tags.items()},
        }
        if _submit:
            live.add(self)
            with self._lock:
                self._schedule()

    def _open(self, client: MlflowClient) -> str:
        """Find (when resuming) or create the run; return its id, also kept as ``run_id``."""
        run_id = self.run_id
        # After a failed create the run may exist all the same (the store committed it, and
        # the answer was lost): look for it rather than create a second one.
        if run_id is None and (self._resume or self._create_failed):
            found = find_trial_runs(client, self.target, trial_numbers=[self.trial_number])
            if found:
                run_id = self.run_id = found[self.trial_number].info.run_id
                if not self._closed:
                    client.update_run(
                        run_id, status="RUNNING", name=tag.run_name(self.trial_number)
                    )
        if run_id is None:
            tags, name = self._start_tags, tag.run_name(self.trial_number)
            with self._lock:
                if self._final is not None:
                    # The trial ended before its run was created (a short trial): the run is
                    # born with its final tags and name, which saves the store a renaming
                    # update (the costliest of a short trial's writes on SQLite).
                    final_tags, self._tags = self._tags, {}
                    tags = {**tags, **final_tags}
                    name = tags.pop(tag.RUN_NAME, name)
                else:
                    final_tags = {}
            try:
                run_id = self.run_id = client.create_run(
                    self.target.experiment_id, tags=tags, run_name=name
                ).info.run_id
            except Exception:
                with self._lock:  # kept for the writer's retry
                    self._tags = {**final_tags, **self._tags}
                self._create_failed = True
                raise
        else:
            # What an earlier attempt logged stays, once: its (metric, step) pairs are skipped.
            earlier = client.get_run(run_id).data
            for key in earlier.metrics:
                self._held.update((key, m.step) for m in client.get_metric_history(run_id, key))
            if tag.INTERRUPTED in earlier.tags and not self._closed:
                client.delete_tag(run_id, tag.INTERRUPTED)  # it runs on: no longer waiting
            self._set_tags_now(client, run_id, self._start_tags)
        return run_id

    @staticmethod
    def _set_tags_now(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def _schedule(self) -> None:
        # Called with the lock held: one drain op in the queue at a time.
        if not self._scheduled:
            self._scheduled = True
            writer.submit(self._drain)

    def _drain(self, *, wait: bool = True) -> None:
        from mlflow.entities import Param, RunTag

        if self._spooled:
            return  # saved to disk: the record, not this process, writes it now

        pause = self._last_drain + BATCH_INTERVAL - time.monotonic()
        if wait and pause > 0:
            self._finishing.wait(pause)  # gather more, unless the trial is ending
        self._last_drain = time.monotonic()
        client = get_client(self.target.uri)
        if self._write_whole(client):
            return
        run_id = self.run_id
        if run_id is None or self._resume:
            run_id = self._open(client)
            self._resume = False
        with self._lock:
            metrics, params, tags = self._metrics, self._params, self._tags
            self._metrics, self._params, self._tags = [], {}, {}
            self._scheduled = False
        metrics = [m for m in metrics if (m.key, m.step) not in self._held]
        self._inflight = (metrics, params, tags)  # in a record too, should the process be saved now
        try:
            param_list = [Param(k, v) for k, v in params.items()]
            tag_list = [RunTag(k, v) for k, v in tags.items()]
            # One transaction when it fits MLflow's batch limits (the usual case).
            while metrics or param_list or tag_list:
                client.log_batch(
                    run_id,
                    metrics=metrics[: MAX_BATCH["metrics"]],
                    params=param_list[: MAX_BATCH["params"]],
                    tags=tag_list[: MAX_BATCH["tags"]],
                )
                self._held.update((m.key, m.step) for m in metrics[: MAX_BATCH["metrics"]])
                metrics = metrics[MAX_BATCH["metrics"] :]
                param_list = param_list[MAX_BATCH["params"] :]
                tag_list = tag_list[MAX_BATCH["tags"] :]
        except Exception:
            self._put_back(metrics, params, tags, retry=True)
            raise
        self._inflight = ([], {}, {})
        while True:
            with self._lock:
                if not self._artifacts:
                    break
                kind, payload, file = self._artifacts[0]
            if kind == "text":
                client.log_text(run_id, payload, file)
            else:
                client.log_image(run_id, payload, artifact_file=file)
            with self._lock:
                self._artifacts.pop(0)
        with self._lock:
            final = (
                self._final
                if not (self._metrics or self._params or self._tags or self._artifacts)
                else None
            )
        if final is not None and not self._closed:
            # The trial's own end, not this write's: the writer may drain it much later.
            client.set_terminated(
                run_id,
                RUN_STATUS[final],
                end_time=self._end_ms,
            )
            self._closed = True
            live.discard(self)

    def _write_whole(self, client: MlflowClient) -> bool:
        """Write a run that does not exist yet and has ended (a short trial) in one
        transaction of MLflow's SQL store, rather than three client calls; return whether it
        was written (``False``: the client writes it, in the usual steps)."""
        if not self._whole or self.run_id is not None or self._resume or self._create_failed:
            return False
        with self._lock:
            if self._final is None or self._artifacts:
                return False
            metrics, params, tags = self._metrics, self._params, self._tags
            self._metrics, self._params, self._tags = [], {}, {}
            self._scheduled = False
            final, end = self._final, self._end_ms or int(time.time() * 1000)
        self._inflight = (metrics, params, tags)  # in a record too, should the process be saved now
        merged = {**self._start_tags, **tags}
        name = merged.pop(tag.RUN_NAME, tag.run_name(self.trial_number))
        try:
            run_id = write_ended_run(
                client,
                self.target.experiment_id,
                name=name,
                tags=merged,
                params=params,
                metrics=metrics,
                status=RUN_STATUS[final],
                start_time=self._start_ms,
                end_time=end,
            )
        except Exception:
            # Whether the transaction committed is not known (the answer may be lost): the
            # writer's retry looks for the run before it creates one.
            self._create_failed = True
            self._put_back(metrics, params, tags, retry=True)
            raise
        self._inflight = ([], {}, {})
        if run_id is None:  # not MLflow's SQL store: the client writes it
            self._whole = False
            self._put_back(metrics, params, tags, retry=False)
            return False
        self.run_id = run_id
        self._held.update((m.key, m.step) for m in metrics)
        self._closed = True
        live.discard(self)
        return True

    def _put_back(
        self, metrics: list[Any], params: dict[str, str], tags: dict[str, str], *, retry: bool
    ) -> None:
        """Put unwritten records back in front of anything newer; with ``retry``, the
        writer retries this run's drain (it failed)."""
        with self._lock:
            self._metrics = metrics + self._metrics
            self._params = {**params, **self._params}
            self._tags = {**tags, **self._tags}
            if retry:
                self._inflight = ([], {}, {})
                self._scheduled = True

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        with self._lock:
            self._metrics.extend(
                Metric(key, float(value), now, int(step)) for key, value in metrics.items()
            )
            self._schedule()

    def log_params(self, params: Mapping[str, Any]) -> None:
        with self._lock:
            for key, value in params.items():
                text = param_value(value)
                if self._logged_params.get(key) != text:  # MLflow refuses to change a param
                    self._logged_params[key] = text
                    self._params[key] = text
            self._schedule()

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        with self._lock:
            self._tags.update({k: str(v) for k, v in tags.items()})
            self._schedule()

    def log_text(self, text: str, artifact_file: str) -> None:
        with self._lock:
            self._artifacts.append(("text", text, artifact_file))
            self._schedule()

    def log_image(self, image: Any, artifact_file: str) -> None:
        """Log an image (an ``H x W x 3`` uint8 array) as an artifact, e.g. ``samples.png``."""
        with self._lock:
            self._artifacts.append(("image", image, artifact_file))
            self._schedule()

    def finish(self, state: str) -> None:
        """Record the final state and end the run (FINISHED, or FAILED for a failed trial)."""
        # The run name travels as the mlflow.runName tag in the last batch.
        self._finishing.set()
        with self._lock:
            self._end_ms = int(time.time() * 1000)
            self._tags.update(
                {tag.STATE: state, tag.RUN_NAME: tag.run_name(self.trial_number, state)}
            )
            self._final = state
            self._schedule()

    # ------------------------------------------------------------ saved to disk, and back

    def pending(self) -> bool:
        with self._lock:
            return not self._closed and bool(
                self._metrics
                or self._params
                or self._tags
                or self._artifacts
                or self._final
                or self.run_id is None
                or any(self._inflight)
            )

    def to_record(self) -> dict[str, Any]:
        """What is not yet written, as JSON-able data."""
        import base64

        import numpy as np

        with self._lock:
            artifacts = []
            for kind, payload, file in self._artifacts:
                if kind == "image":
                    array = np.ascontiguousarray(payload, dtype=np.uint8)
                    payload = {
                        "shape": list(array.shape),
                        "data": base64.b64encode(array.tobytes()).decode(),
                    }
                artifacts.append([kind, payload, file])
            sending_metrics, sending_params, sending_tags = self._inflight
            return {
                "target": dataclasses.asdict(self.target),
                "trial_number": self.trial_number,
                "run_id": self.run_id,
                "start_tags": self._start_tags,
                "metrics": [
                    [m.key, m.value, m.timestamp, m.step]
                    for m in [*sending_metrics, *self._metrics]
                ],
                "params": {**sending_params, **self._params},
                "tags": {**sending_tags, **self._tags},
                "artifacts": artifacts,
                "final": self._final,
                "start_ms": self._start_ms,
                "end_ms": self._end_ms,
            }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TrialRun:
        import base64

        import numpy as np
        from mlflow.entities import Metric

        run = cls(
            TrackingTarget(**record["target"]),
            int(record["trial_number"]),
            tags={},
            resume=True,
            _submit=False,
        )
        run.run_id = record.get("run_id")
        run._start_tags = dict(record["start_tags"])
        run._metrics = [
            Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in record["metrics"]
        ]
        run._params = dict(record["params"])
        run._tags = dict(record["tags"])
        for kind, payload, file in record["artifacts"]:
            if kind == "image":
                payload = np.frombuffer(base64.b64decode(payload["data"]), dtype=np.uint8).reshape(
                    payload["shape"]
                )
            run._artifacts.append((kind, payload, file))
        run._final = record.get("final")
        run._start_ms = int(record.get("start_ms") or run._start_ms)
        run._end_ms = record.get("end_ms")
        run._finishing.set()
        return run


#: This process's trial runs that may still have writes to make.
live: set[TrialRun] = set()
