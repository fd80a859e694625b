"""A short trial's whole MLflow run in one transaction of MLflow's SQL store.

A trial that ends before its first write (most trials of a study whose trials take
milliseconds to seconds) costs MLflow's client three calls: ``create_run``, ``log_batch``,
``set_terminated``. On a SQL store that is 33 SQL statements in six sessions and 12-15 ms
of CPU a run (``benchmarks/tracking_writes.py``), about half of what a trivial trial
costs the whole study. MLflow's API has no call that creates a run with its data, or ended,
or several runs at once, so :func:`write_ended_run` writes the rows that those three
calls write (``runs``, ``tags``, ``params``, ``metrics``, ``latest_metrics``) itself,
through MLflow's own table definitions and session maker, in one transaction.

That reaches MLflow's private modules (its store class, ORM models, validation and the
store of a client); all of it is in this module, used only on the MLflow versions it was
checked on (:data:`CHECKED_ON`, pinned by ``tests/test_tracking_sql_store.py``,
which also checks that a run written here reads back through MLflow's public API exactly as
one written through the client does). Anything else (another MLflow version, an HTTP
tracking server, a file store) gets ``None`` back, and the caller makes the three public
calls.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

log = logging.getLogger("hpsearch.tracking")

#: The MLflow versions (major.minor) this module was checked on; on any other, the client's
#: public calls write every run.
CHECKED_ON = ("3.17",)

#: Each store's experiments' artifact locations, read once (``None``: not active).
_artifact_roots: weakref.WeakKeyDictionary[Any, dict[str, str | None]]
_artifact_roots = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _artifact_root(client: MlflowClient, store: Any, experiment_id: str) -> str | None:
    """The experiment's artifact location, read once per store and experiment; ``None``
    when the experiment is not active (the client's path then fails as MLflow does)."""
    with _lock:
        known = _artifact_roots.setdefault(store, {})
        if experiment_id in known:
            return known[experiment_id]
    experiment = client.get_experiment(experiment_id)
    root = experiment.artifact_location if experiment.lifecycle_stage == "active" else None
    with _lock:
        known[experiment_id] = root
    return root


def write_ended_run(
    client: MlflowClient,
    experiment_id: str,
    *,
    name: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    metrics: Sequence[Metric],
    status: str,
    start_time: int,
    end_time: int,
) -> str | None:
    """Write a whole, ended run (its tags, params, metrics and final status) in one
    transaction; return its id, or ``None`` where the store is not MLflow's SQL store.

    Raises what MLflow raises for data it refuses (names, lengths, batch limits), before
    anything is written; a failed transaction leaves nothing behind.
    """
    store = _sql_store(client)
    if store is None:
        return None
    root = _artifact_root(client, store, experiment_id)
    if root is None:
        return None
    metric_list, param_list, tag_list = _checked_batch(name, tags, params, metrics)
    run_id = uuid.uuid4().hex
    metric_rows, latest = _metric_rows(store, run_id, metric_list)
    run_row = _run_row(
        run_id,
        experiment_id,
        name=name,
        artifact_root=root,
        user=_user(tags),
        status=status,
        start_time=start_time,
        end_time=end_time,
    )
    with store.ManagedSessionMaker(read_only=False) as session:
        _insert(session, run_row, tag_list, param_list, metric_rows, latest)
    return run_id


def _sql_store(client: MlflowClient) -> Any | None:
    """The client's store where it is MLflow's SQL store on a checked version, else ``None``.

    Every MLflow name this module writes through is imported here first: on an MLflow that
    lacks one, the caller gets ``None`` and makes the public calls, and the functions below,
    which import the same names again, never meet an ImportError. It writes nothing.
    """
    try:
        import mlflow

        if ".".join(mlflow.__version__.split(".")[:2]) not in CHECKED_ON:
            return None
        # Imported only to learn that they are there (used by the functions below).
        from mlflow.entities import Param, RunTag  # noqa: F401
        from mlflow.store.tracking.dbmodels.models import (  # noqa: F401
            SqlLatestMetric,
            SqlMetric,
            SqlParam,
            SqlRun,
            SqlTag,
        )
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME, MLFLOW_USER  # noqa: F401
        from mlflow.utils.uri import append_to_uri_path  # noqa: F401
        from mlflow.utils.validation import (  # noqa: F401
            _validate_batch_log_data,
            _validate_batch_log_limits,
            _validate_param_keys_unique,
        )
        from sqlalchemy import insert  # noqa: F401

        # MLflow keeps a client's store on a private attribute; no public accessor exists.
        store = client._tracking_client.store
    except (ImportError, AttributeError):  # another MLflow: the public calls do it
        return None
    return store if isinstance(store, SqlAlchemyStore) else None


def _checked_batch(
    name: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    metrics: Sequence[Metric],
) -> tuple[list[Metric], list[Any], list[Any]]:
    """The run's metrics, params and tags (the run name among them) as MLflow's
    ``log_batch`` checks them: names, values, lengths, limits, unique param keys. Raises
    what MLflow raises; it never changes what it is given."""
    from mlflow.entities import Param, RunTag
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME
    from mlflow.utils.validation import (
        _validate_batch_log_data,
        _validate_batch_log_limits,
        _validate_param_keys_unique,
    )

    tag_list = [RunTag(k, v) for k, v in {**tags, MLFLOW_RUN_NAME: name}.items()]
    param_list = [Param(k, v) for k, v in params.items()]
    metric_list, param_list, tag_list = _validate_batch_log_data(
        list(metrics), param_list, tag_list
    )
    _validate_batch_log_limits(metric_list, param_list, tag_list)
    _validate_param_keys_unique(param_list)
    return metric_list, param_list, tag_list


def _metric_rows(
    store: Any, run_id: str, metrics: Sequence[Metric]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``metrics`` rows of a run (one per distinct key, timestamp, step and value, as
    MLflow keeps them) and its ``latest_metrics`` rows (one per key)."""
    rows: dict[tuple[str, int, int, float, bool], dict[str, Any]] = {}
    latest: dict[str, dict[str, Any]] = {}
    for m in metrics:
        is_nan, value = store.sanitize_metric_value(m.value)
        row = {
            "run_uuid": run_id,
            "key": m.key,
            "value": value,
            "timestamp": m.timestamp,
            "step": m.step,
            "is_nan": is_nan,
        }
        rows.setdefault((m.key, m.timestamp, m.step, value, is_nan), row)
        if _later(row, latest.get(m.key)):
            latest[m.key] = row
    return list(rows.values()), list(latest.values())


def _later(row: dict[str, Any], best: dict[str, Any] | None) -> bool:
    """Whether ``row`` is the key's latest metric rather than ``best``: MLflow's latest
    metric is the largest (step, timestamp, value) of each key."""
    if best is None:
        return True
    return (row["step"], row["timestamp"], row["value"]) > (
        best["step"],
        best["timestamp"],
        best["value"],
    )


def _user(tags: Mapping[str, str]) -> str:
    """The run's user, from its ``mlflow.user`` tag (MLflow's ``unknown`` without one)."""
    from mlflow.utils.mlflow_tags import MLFLOW_USER

    return tags.get(MLFLOW_USER, "unknown")


def _run_row(
    run_id: str,
    experiment_id: str,
    *,
    name: str,
    artifact_root: str,
    user: str,
    status: str,
    start_time: int,
    end_time: int,
) -> dict[str, Any]:
    """The ``runs`` row of an ended, active run, as MLflow's ``create_run`` and
    ``set_terminated`` leave it."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.utils.uri import append_to_uri_path

    return {
        "run_uuid": run_id,
        "name": name,
        "artifact_uri": append_to_uri_path(
            artifact_root, run_id, SqlAlchemyStore.ARTIFACTS_FOLDER_NAME
        ),
        "experiment_id": int(experiment_id),
        "source_type": "UNKNOWN",
        "source_name": "",
        "entry_point_name": "",
        "user_id": user,
        "status": status,
        "start_time": start_time,
        "end_time": end_time,
        "deleted_time": None,
        "source_version": "",
        "lifecycle_stage": "active",
    }


def _insert(
    session: Any,
    run_row: dict[str, Any],
    tags: Sequence[Any],
    params: Sequence[Any],
    metric_rows: list[dict[str, Any]],
    latest: list[dict[str, Any]],
) -> None:
    """Insert a run's rows in ``session`` (the caller's transaction): the run, then its
    tags, params, metrics and latest metrics; a table with nothing to add is not touched."""
    from mlflow.store.tracking.dbmodels.models import (
        SqlLatestMetric,
        SqlMetric,
        SqlParam,
        SqlRun,
        SqlTag,
    )
    from sqlalchemy import insert

    run_id = run_row["run_uuid"]
    session.execute(insert(SqlRun.__table__), [run_row])
    if tags:
        session.execute(
            insert(SqlTag.__table__),
            [{"run_uuid": run_id, "key": t.key, "value": t.value} for t in tags],
        )
    if params:
        session.execute(
            insert(SqlParam.__table__),
            [{"run_uuid": run_id, "key": p.key, "value": p.value} for p in params],
        )
    if metric_rows:
        session.execute(insert(SqlMetric.__table__), metric_rows)
        session.execute(insert(SqlLatestMetric.__table__), latest)
