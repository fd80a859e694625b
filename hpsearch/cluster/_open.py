"""The one way a study gets its Dask cluster: :func:`backend_for` picks the back-end of the
spec's ``cluster`` section, :func:`open_client` starts it.

Example:
    >>> from hpsearch.spec import StudySpec
    >>> spec = StudySpec.from_dict({"name": "s", "objective": {"model": "mlp", "dataset": "mnist"},
    ...     "cluster": {"scheduler": "tcp://10.0.0.5:8786"}})        # doctest: +SKIP
    >>> print(backend_for(spec).render())                           # doctest: +SKIP
    existing Dask scheduler tcp://10.0.0.5:8786: ...
    >>> with open_client(spec) as client:                           # doctest: +SKIP
    ...     client.submit(sum, [1, 2]).result()
    3
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from hpsearch.cluster._backend import Backend, trial_sizes

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.spec import StudySpec

__all__ = ["Backend", "backend_for", "open_client", "trial_sizes"]


def backend_for(spec: StudySpec, *, client: Client | None = None) -> Backend:
    """The back-end that starts or joins the study's cluster (nothing is started yet).

    Args:
        spec: the study spec.
        client: a ``distributed.Client`` to run on as it is (it is not closed afterwards).
    """
    from hpsearch.cluster._local_backend import ClientBackend, LocalBackend, SchedulerBackend

    if client is not None:
        return ClientBackend(spec, client)
    backend = spec.cluster.backend
    if backend in ("slurm", "kubernetes"):
        from hpsearch.cluster._batch import KubernetesBackend, SlurmBackend

        return SlurmBackend(spec) if backend == "slurm" else KubernetesBackend(spec)
    if spec.cluster.address:
        return SchedulerBackend(spec)
    return LocalBackend(spec)


@contextlib.contextmanager
def open_client(spec: StudySpec, *, client: Client | None = None) -> Iterator[Client]:
    """Start (or join) the study's cluster and yield a ``distributed.Client`` to it; what was
    started here is closed on the way out."""
    with backend_for(spec, client=client) as opened:
        yield opened
