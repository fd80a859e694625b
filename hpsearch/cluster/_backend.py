"""What every cluster back-end offers: the text ``--dry-run`` prints, and a client to run on.

A back-end is chosen from the spec by :func:`hpsearch.cluster._open.backend_for`; the study
asks it where the workers are (to refuse a tracking file they cannot write, and to pick the
interface the storage proxy listens on), then opens it for the length of the run.
"""

from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.spec import StudySpec

#: Dask's in-memory logs, shortened for the clusters and clients a study opens: a study can
#: run for days, and these held megabytes in the coordinator (and in each worker) for nothing
#: but debugging and the dashboard's plots.
#:
#: - ``distributed.admin.low-level-log-length`` (1,000 by default) bounds the scheduler's
#:   transition log and event topics, the last batches of messages each batched comm keeps
#:   (on the scheduler, one per worker, and the client's to the scheduler) and the workers'
#:   state machine logs. Each task message holds its trial's task and spec: at the default
#:   the coordinator's RSS grew about 22 MiB per 1000 short trials (benchmarks/soak.py
#:   --plain), 4 MiB at 50; the workers' 2.5-3.5, 1-1.5 at 50.
#:   (``distributed.scheduler.transition-log-length``,
#:   ``distributed.scheduler.events-log-length`` and
#:   ``distributed.comm.recent-messages-log-length`` are its older names.)
#: - ``distributed.admin.system-monitor.log-length``: the samples of the process's CPU,
#:   memory and network every 0.5 s (7,200 by default: an hour, about 1 KB each, some 7 MB
#:   in each process once full); 600 keep the dashboard's plots five minutes long.
#: - ``distributed.diagnostics.computations.max-history``: past computations (the
#:   dashboard's), each holding its task groups.
#:
#: A value set explicitly (dask's config files, ``DASK_*`` variables, ``dask.config.set``)
#: is kept.
DASK_LOG_LENGTHS: dict[str, int] = {
    "distributed.admin.low-level-log-length": 50,
    "distributed.admin.system-monitor.log-length": 600,
    "distributed.diagnostics.computations.max-history": 10,
}


def dask_log_lengths() -> dict[str, int]:
    """The :data:`DASK_LOG_LENGTHS` to set: those whose value is still Dask's default."""
    import dask
    import distributed  # noqa: F401  (its defaults in dask's config)

    defaults = dask.config.merge(*dask.config.defaults)
    return {
        key: value
        for key, value in DASK_LOG_LENGTHS.items()
        if dask.config.get(key, None) == dask.config.get(key, None, config=defaults)
    }


#: :attr:`Backend.remote` of a batch cluster: its workers are other nodes, wherever its scheduler.
BATCH = "batch"


def trial_sizes(spec: StudySpec) -> list[float]:
    """The set sizes trials may ask for (several when ``gpus_per_trial`` is searched; a
    fraction of one device where trials are packed)."""
    p = spec.space.get("gpus_per_trial")
    if p is None:
        return [spec.trial_devices]
    if p.type == "categorical":
        return sorted({int(cast("float | str", c)) for c in p.choices})
    return list(range(int(p.low), int(p.high) + 1, int(getattr(p, "step", 1) or 1)))


def proxy_host(remote: str | None) -> str:
    """Where the storage proxy listens: loopback, or the interface that reaches the workers."""
    if remote is None:
        return "127.0.0.1"
    from distributed.utils import get_ip

    if remote == BATCH:  # the nodes of a batch cluster: the machine's outward interface
        try:
            return get_ip()
        except OSError:
            import socket

            return socket.gethostbyname(socket.gethostname())
    return get_ip(remote)


class Backend(abc.ABC):
    """One way of getting a Dask cluster for a study.

    Args:
        spec: the study spec; its ``cluster`` section says how the cluster starts.
    """

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        self._started: contextlib.ExitStack | None = None
        #: What scales the jobs with the trials while it runs (``cluster.adapt`` on SLURM:
        #: a :class:`~hpsearch.cluster._scaling.JobScaler`), else ``None``.
        self.scaler: Any = None

    @property
    def remote(self) -> str | None:
        """The workers' host when they are on other machines (:data:`BATCH` for a batch
        cluster), or ``None`` when they run on this one."""
        return None

    @property
    def may_start_empty(self) -> bool:
        """Whether the cluster may have no worker when the study starts (jobs are started for
        its trials), so that an empty cluster is not an error."""
        return False

    @property
    def resource_key(self) -> str | None:
        """The resource its workers will advertise, where known before any has joined."""
        return None

    @property
    def proxy_host(self) -> str:
        """The address the storage proxy should listen on for these workers."""
        return proxy_host(self.remote)

    @abc.abstractmethod
    def render(self) -> str:
        """What the cluster would run, as text, without starting or submitting anything."""

    @abc.abstractmethod
    def start(self) -> contextlib.AbstractContextManager[Client]:
        """Start or join the cluster: a context manager yielding a ``distributed.Client``
        and closing what it started on the way out."""

    def __enter__(self) -> Client:
        import dask

        # For the cluster's whole life: its scheduler, nannies and client read them as they
        # start, and the scheduler's comm to each worker as the worker joins.
        stack = contextlib.ExitStack()
        stack.enter_context(dask.config.set(dask_log_lengths()))
        try:
            client = stack.enter_context(self.start())
        except BaseException:
            stack.close()
            raise
        self._started = stack
        return client

    def __exit__(self, *exc_info: object) -> bool | None:
        started, self._started = self._started, None
        assert started is not None, "the back-end was not entered"
        return started.__exit__(*exc_info)  # type: ignore[arg-type]
