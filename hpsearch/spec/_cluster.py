"""The cluster section: local, SLURM or Kubernetes workers, adaptive scaling, TLS, and the
checks between its fields and the study's storage."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from hpsearch.spec._messages import (
    _AutoOrInt,
    _choice,
    _fail,
    _Int,
    _OptStr,
    _show,
    _Spec,
    _Str,
)
from hpsearch.spec._simulated import SimulatedSpec


def _check_gpus(value: Any) -> Any:
    if value in ("auto", "none"):
        return value
    if not isinstance(value, (list, tuple)):
        raise _fail(f"expected 'auto', 'none' or a list of GPU indices, got {_show(value)}")
    for gpu in value:
        if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
            raise _fail(f"GPU indices must be non-negative integers, got {_show(gpu)}")
    duplicates = sorted({gpu for gpu in value if list(value).count(gpu) > 1})
    if duplicates:
        raise _fail(f"GPU indices must be distinct, got {', '.join(map(str, duplicates))} twice")
    return list(value)


class SlurmSpec(_Spec):
    """Workers as SLURM jobs (dask-jobqueue's ``SLURMCluster``): one job per node, one worker
    per GPU set of the node."""

    queue: _Str = Field(description="The partition (#SBATCH -p). Required.")
    account: _OptStr = Field(default=None, description="The account (#SBATCH -A). Default null.")
    walltime: _Str = Field(
        default="01:00:00", description="Each job's time limit (#SBATCH -t). Default 01:00:00."
    )
    jobs: _Int = Field(default=1, ge=1, description="Jobs (nodes) to start. Default 1.")
    gpus_per_node: _Int = Field(
        default=1, ge=0, description="GPUs of each node (--gres=gpu:N). Default 1."
    )
    cores: _Int = Field(default=8, ge=1, description="CPU cores per job. Default 8.")
    memory: _Str = Field(default="32GB", description="Memory per job. Default 32GB.")
    job_script_prologue: list[_Str] = Field(
        default_factory=list,
        description="Shell lines before the worker starts (module loads, venv). Default [].",
    )
    job_extra_directives: list[_Str] = Field(
        default_factory=list,
        description="More #SBATCH options, e.g. ['--constraint=a100']. Default [].",
    )
    python: _OptStr = Field(
        default=None, description="The Python on the nodes. Default: this one's path."
    )
    warning_seconds: _Int = Field(
        default=60,
        ge=0,
        description=(
            "Seconds before a job ends (its walltime, or a preemption where the site gives a "
            "grace time) that SLURM warns it (#SBATCH --signal=B:USR1@N): its trials write "
            "their checkpoints, yield, and resume on another job, losing no epoch. 0: no "
            "warning. Default 60."
        ),
    )


class KubernetesSpec(_Spec):
    """Workers as pods of a Dask Kubernetes operator cluster (dask-kubernetes)."""

    image: _Str = Field(
        description="The container image, with hpsearch and torch installed. Required."
    )
    namespace: _Str = Field(default="default", description="The namespace. Default 'default'.")
    workers: _Int = Field(default=1, ge=1, description="Worker pods. Default 1.")
    gpus_per_worker: _Int = Field(
        default=1, ge=0, description="nvidia.com/gpu limit of each worker pod. Default 1."
    )
    cpu: _Str = Field(default="4", description="CPU limit of each worker pod. Default 4.")
    memory: _Str = Field(default="16G", description="Memory limit of each worker pod. Default 16G.")
    env: dict[str, _Str] = Field(
        default_factory=dict, description="Environment of the pods. Default {}."
    )


class TlsSpec(_Spec):
    """Certificates for the Dask scheduler, workers and client (``distributed.Security``)."""

    ca_file: _Str = Field(
        description="The CA certificate that signed every certificate (PEM). Required."
    )
    cert: _Str = Field(description="This machine's certificate (PEM). Required.")
    key: _Str = Field(description="Its private key (PEM). Required.")


class AdaptSpec(_Spec):
    """Adaptive scaling of a SLURM or Kubernetes cluster: workers come and go between these."""

    minimum: _Int = Field(default=0, ge=0, description="Fewest jobs (SLURM) or pods. Default 0.")
    maximum: _Int = Field(ge=1, description="Most jobs (SLURM) or pods. Required.")


class MetricsSpec(_Spec):
    """The coordinator's Prometheus endpoint (``GET http://HOST:PORT/metrics``)."""

    port: _Int = Field(
        default=0,
        ge=0,
        le=65535,
        description=(
            "The port: 0 (a free one, printed at start and written to RUN_DIR/NAME/metrics.json) "
            "or 1-65535. Default 0."
        ),
    )
    host: _Str = Field(
        default="127.0.0.1",
        description="The address it listens on (0.0.0.0 for every interface). Default 127.0.0.1.",
    )


class ClusterSpec(_Spec):
    """Where trials run."""

    address: _OptStr = Field(
        default=None,
        description=(
            "Address of an existing Dask scheduler, such as a pool that several studies share "
            "(hpsearch pool start). Default null: start a local cluster. (Formerly "
            "cluster.scheduler, which still works.)"
        ),
    )
    n_workers: _AutoOrInt = Field(
        default="auto",
        description="Workers to start: 'auto' (one per GPU set) or >= 1. Default auto.",
    )
    gpus: Annotated[Literal["auto", "none"] | list[int], BeforeValidator(_check_gpus)] = Field(
        default="auto",
        description=(
            "'auto' (all visible), 'none' (CPU only) or a list of distinct GPU indices. "
            "Default auto."
        ),
    )
    slots: _AutoOrInt = Field(
        default="auto",
        description=(
            "CPU slots of the local cluster where it has no GPUs (a trial of gpus_per_trial=k "
            "takes k slots, one rank each): 'auto' (one per core) or >= 1. Default auto."
        ),
    )
    backend: Annotated[
        str, BeforeValidator(_choice("backend", ["local", "slurm", "kubernetes", "simulated"]))
    ] = Field(
        default="local",
        description=(
            "local (worker processes on this machine, or cluster.address's workers), slurm, "
            "kubernetes, or simulated (a surrogate benchmark's trials in virtual time). "
            "Default local."
        ),
    )
    simulated: SimulatedSpec | None = Field(
        default=None,
        description="The simulated cluster (backend: simulated). Default: 4 workers.",
    )
    slurm: SlurmSpec | None = Field(default=None, description="SLURM settings (backend: slurm).")
    kubernetes: KubernetesSpec | None = Field(
        default=None, description="Kubernetes settings (backend: kubernetes)."
    )
    adapt: AdaptSpec | None = Field(
        default=None, description="Adaptive scaling (slurm, kubernetes). Default null: fixed size."
    )
    storage_access: Annotated[
        str, BeforeValidator(_choice("storage_access", ["proxy", "direct"]))
    ] = Field(
        default="proxy",
        description=(
            "How workers reach the Optuna study: proxy (through the coordinator's gRPC storage "
            "proxy: no database access or credentials on the workers) or direct (each worker "
            "opens the database URL in storage itself). Default proxy."
        ),
    )
    tls: Literal["auto"] | TlsSpec | None = Field(
        default=None,
        description=(
            "TLS between the coordinator, the scheduler and the workers: null (none; the local "
            "cluster listens on 127.0.0.1 only), 'auto' (a temporary self-signed setup for the "
            "local cluster) or {ca_file, cert, key}. Default null."
        ),
    )
    metrics: MetricsSpec | None = Field(
        default_factory=MetricsSpec,
        description=(
            "The study's metrics for Prometheus: {port, host}, or null for none. "
            "Default {port: 0, host: 127.0.0.1}."
        ),
    )


def _check_backend(cluster: Any, problems: Any, storage: Any = None) -> None:
    if cluster is None:
        return
    if cluster.simulated is not None and cluster.backend != "simulated":
        problems.add(
            "cluster.simulated",
            f"only used with backend: simulated (backend is {cluster.backend})",
        )
    for name in ("slurm", "kubernetes"):
        if cluster.backend == name and getattr(cluster, name) is None:
            problems.add(f"cluster.{name}", f"required with backend: {name}")
        if cluster.backend != name and getattr(cluster, name) is not None:
            problems.add(
                f"cluster.{name}", f"only used with backend: {name} (backend is {cluster.backend})"
            )
    if cluster.adapt is not None:
        if cluster.backend == "local":
            problems.add("cluster.adapt", "only slurm and kubernetes clusters adapt")
        elif cluster.adapt.minimum > cluster.adapt.maximum:
            problems.add(
                "cluster.adapt",
                f"minimum ({cluster.adapt.minimum}) must be <= maximum ({cluster.adapt.maximum})",
            )
    if cluster.tls == "auto" and (cluster.address or cluster.backend != "local"):
        problems.add(
            "cluster.tls",
            "'auto' is for the local cluster only; give {ca_file, cert, key} for other machines",
        )
    if isinstance(cluster.tls, TlsSpec):
        for name in ("ca_file", "cert", "key"):
            if not Path(os.path.expanduser(getattr(cluster.tls, name))).is_file():
                problems.add(f"cluster.tls.{name}", f"no such file: {getattr(cluster.tls, name)}")
    if cluster.storage_access == "direct" and (
        storage is None
        or str(storage).startswith("journal://")
        or str(storage).endswith(".journal")
    ):
        problems.add(
            "cluster.storage_access",
            "direct needs a database URL in storage (e.g. postgresql+psycopg://...); "
            "a journal file stays with the coordinator",
        )
    if cluster.backend != "local" and cluster.address:
        problems.add(
            "cluster.address",
            f"not used with backend: {cluster.backend} (it starts its own scheduler)",
        )
