"""Workers from a batch system: SLURM jobs (dask-jobqueue) or Kubernetes pods (dask-kubernetes).

Each job or pod runs :mod:`hpsearch.cluster.jobqueue_worker`, which starts one Dask worker
per GPU set of its node, exactly as ``hpsearch worker`` does, so trials get exclusive GPU
sets there as they do on one machine. :func:`slurm_job_script` and
:func:`kubernetes_manifest` render what would be submitted, without submitting (``hpsearch
run FILE --dry-run``); :class:`SlurmBackend` and :class:`KubernetesBackend` start them for a run.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hpsearch.cluster._backend import BATCH, Backend

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.spec import StudySpec

WORKER_MODULE = "hpsearch.cluster.jobqueue_worker"

#: Seconds to wait for the first SLURM job or Kubernetes pod to join (queues can be slow).
BATCH_WORKER_TIMEOUT_S = float(os.environ.get("HPSEARCH_BATCH_WORKER_TIMEOUT_S", "3600"))


def _worker_args(spec: StudySpec, gpus: int, slots: int | None = None) -> list[str]:
    size = f"{spec.trial_devices:g}"
    args = ["--gpus", "auto" if gpus else "none", "--gpus-per-trial", size]
    return [*args, "--slots", str(slots)] if slots and not gpus else args


def sets_per_job(spec: StudySpec) -> int:
    """Trials one SLURM job runs at once: its GPUs, or its cores, in sets of the trial size."""
    slurm = spec.cluster.slurm
    assert slurm is not None
    return max(1, int((slurm.gpus_per_node or slurm.cores) // spec.trial_devices))


def slurm_options(spec: StudySpec) -> dict[str, Any]:
    """The keyword arguments of ``SLURMCluster`` (and ``SLURMJob``) for this study."""
    slurm = spec.cluster.slurm
    assert slurm is not None
    directives = [f"--gres=gpu:{slurm.gpus_per_node}"] if slurm.gpus_per_node else []
    python = slurm.python or sys.executable
    if slurm.warning_seconds:
        # The warning goes to the batch shell (B:), which the worker launcher replaces
        # (exec): it reaches the launcher itself, which hands it to its workers.
        directives.append(f"--signal=B:USR1@{slurm.warning_seconds}")
        python = f"exec {python}"
    return {
        "queue": slurm.queue,
        "account": slurm.account,
        "walltime": slurm.walltime,
        "cores": slurm.cores,
        "memory": slurm.memory,
        "processes": 1,  # one launcher per node; it starts a worker per GPU set
        "job_name": f"hpsearch-{spec.name}",
        "job_extra_directives": directives + list(slurm.job_extra_directives),
        "job_script_prologue": list(slurm.job_script_prologue),
        "python": python,
        "worker_command": WORKER_MODULE,
        # Without GPUs a job has a slot per core it asked for (not one per core of the node).
        "worker_extra_args": _worker_args(spec, slurm.gpus_per_node, slurm.cores),
    }


def slurm_job_script(spec: StudySpec, scheduler: str = "tcp://SCHEDULER:8786") -> str:
    """The job script each SLURM job runs (nothing is submitted)."""
    from dask_jobqueue.slurm import SLURMJob

    options = slurm_options(spec)
    return SLURMJob(scheduler=scheduler, name=options["job_name"], **options).job_script()


def start_slurm_cluster(spec: StudySpec) -> Any:
    """A ``SLURMCluster`` with the study's jobs submitted (with ``cluster.adapt``, its
    minimum: :class:`~hpsearch.cluster._scaling.JobScaler` submits the others)."""
    import dask
    from dask_jobqueue import SLURMCluster

    assert spec.cluster.slurm is not None
    # Its scheduler runs here. A job that dies fails its trial at once, as on a local cluster
    # (not retried by Dask): the coordinator counts the loss and resumes the trial.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = SLURMCluster(**slurm_options(spec))
    adapt = spec.cluster.adapt
    jobs = adapt.minimum if adapt is not None else spec.cluster.slurm.jobs
    if jobs:
        cluster.scale(jobs=jobs)
    return cluster


def kubernetes_manifest(spec: StudySpec) -> dict[str, Any]:
    """The ``DaskCluster`` resource of the Dask Kubernetes operator for this study."""
    from dask_kubernetes.operator import make_cluster_spec

    kube = spec.cluster.kubernetes
    assert kube is not None
    limits: dict[str, str] = {"cpu": kube.cpu, "memory": kube.memory}
    if kube.gpus_per_worker:
        limits["nvidia.com/gpu"] = str(kube.gpus_per_worker)
    manifest = make_cluster_spec(
        f"hpsearch-{spec.name}".lower().replace("_", "-").replace(".", "-")[:63],
        image=kube.image,
        n_workers=kube.workers,
        resources={"limits": limits, "requests": dict(limits)},
        env=dict(kube.env),
        worker_command=f"python -m {WORKER_MODULE}",
    )
    manifest = copy.deepcopy(manifest)  # the scheduler and the workers share one resources object
    manifest["metadata"]["namespace"] = kube.namespace
    worker = manifest["spec"]["worker"]["spec"]["containers"][0]
    worker["args"] += _worker_args(spec, kube.gpus_per_worker)
    scheduler = manifest["spec"]["scheduler"]["spec"]["containers"][0]
    scheduler["resources"] = {
        "limits": {"cpu": "1", "memory": "2G"},
        "requests": {"cpu": "1", "memory": "2G"},
    }
    return manifest


def start_kubernetes_cluster(spec: StudySpec) -> Any:
    """A ``KubeCluster`` from :func:`kubernetes_manifest` (or adapting)."""
    from dask_kubernetes.operator import KubeCluster

    kube = spec.cluster.kubernetes
    assert kube is not None
    cluster = KubeCluster(custom_cluster_spec=kubernetes_manifest(spec), namespace=kube.namespace)
    if spec.cluster.adapt is not None:
        cluster.adapt(minimum=spec.cluster.adapt.minimum, maximum=spec.cluster.adapt.maximum)
    return cluster


class _BatchBackend(Backend):
    """Workers from a batch system; the study's scheduler runs here (SLURM) or in the
    cluster (Kubernetes), and its workers are other nodes either way."""

    @property
    def remote(self) -> str | None:
        return BATCH

    @property
    def may_start_empty(self) -> bool:
        """Whether the study starts with no worker (``adapt: {minimum: 0}``): jobs are
        started for its first trials."""
        adapt = self.spec.cluster.adapt
        return adapt is not None and adapt.minimum == 0

    @abc.abstractmethod
    def _cluster(self) -> Any:
        """The started dask-jobqueue or dask-kubernetes cluster object."""

    def _scaler(self, batch: Any, client: Client) -> Any:
        """What scales the jobs with the trials (``None``: Dask's own adaptive scaling)."""
        return None

    @contextlib.contextmanager
    def start(self) -> Iterator[Client]:
        from distributed import Client

        batch = self._cluster()
        client = Client(batch)
        try:
            adapt = self.spec.cluster.adapt
            wanted = adapt.minimum if adapt else 1
            if wanted:
                client.wait_for_workers(wanted, timeout=BATCH_WORKER_TIMEOUT_S)
            self.scaler = self._scaler(batch, client)
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close()
            with contextlib.suppress(Exception):
                batch.close()


class SlurmBackend(_BatchBackend):
    """SLURM jobs submitted through dask-jobqueue (``cluster.backend: slurm``)."""

    def render(self) -> str:
        return slurm_job_script(self.spec)

    @property
    def resource_key(self) -> str | None:
        assert self.spec.cluster.slurm is not None
        return "GPU" if self.spec.cluster.slurm.gpus_per_node else "SLOT"

    def _cluster(self) -> Any:
        return start_slurm_cluster(self.spec)

    def _scaler(self, batch: Any, client: Client) -> Any:
        adapt = self.spec.cluster.adapt
        if adapt is None:
            return None
        from hpsearch.cluster._scaling import JobScaler

        return JobScaler(
            batch,
            client,
            minimum=adapt.minimum,
            maximum=adapt.maximum,
            sets_per_job=sets_per_job(self.spec),
        )


class KubernetesBackend(_BatchBackend):
    """Pods of the Dask Kubernetes operator (``cluster.backend: kubernetes``)."""

    def render(self) -> str:
        import yaml

        return yaml.safe_dump(kubernetes_manifest(self.spec), sort_keys=False)

    @property
    def resource_key(self) -> str | None:
        assert self.spec.cluster.kubernetes is not None
        return "GPU" if self.spec.cluster.kubernetes.gpus_per_worker else "SLOT"

    def _cluster(self) -> Any:
        return start_kubernetes_cluster(self.spec)
