"""Workers from a batch system: SLURM jobs (dask-jobqueue) or Kubernetes pods (dask-kubernetes).

Each job or pod runs :mod:`hpsearch.cluster.jobqueue_worker`, which starts one Dask worker
per GPU set of its node, exactly as ``hpsearch worker`` does, so trials get exclusive GPU
sets there as they do on one machine. :func:`slurm_job_script` and
:func:`kubernetes_manifest` render what would be submitted, without submitting (``hpsearch
run FILE --dry-run``).
"""

from __future__ import annotations

import copy
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.spec import StudySpec

WORKER_MODULE = "hpsearch.cluster.jobqueue_worker"


def _worker_args(spec: StudySpec, gpus: int) -> list[str]:
    size = int(spec.objective.gpus_per_trial or 1)
    return ["--gpus", "auto" if gpus else "none", "--gpus-per-trial", str(size)]


def slurm_options(spec: StudySpec) -> dict[str, Any]:
    """The keyword arguments of ``SLURMCluster`` (and ``SLURMJob``) for this study."""
    slurm = spec.cluster.slurm
    assert slurm is not None
    directives = [f"--gres=gpu:{slurm.gpus_per_node}"] if slurm.gpus_per_node else []
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
        "python": slurm.python or sys.executable,
        "worker_command": WORKER_MODULE,
        "worker_extra_args": _worker_args(spec, slurm.gpus_per_node),
    }


def slurm_job_script(spec: StudySpec, scheduler: str = "tcp://SCHEDULER:8786") -> str:
    """The job script each SLURM job runs (nothing is submitted)."""
    from dask_jobqueue.slurm import SLURMJob

    options = slurm_options(spec)
    return SLURMJob(scheduler=scheduler, name=options["job_name"], **options).job_script()


def start_slurm_cluster(spec: StudySpec) -> Any:
    """A ``SLURMCluster`` with the study's jobs submitted (or adapting)."""
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(**slurm_options(spec))
    if spec.cluster.adapt is not None:
        cluster.adapt(
            minimum_jobs=spec.cluster.adapt.minimum, maximum_jobs=spec.cluster.adapt.maximum
        )
    else:
        assert spec.cluster.slurm is not None
        cluster.scale(jobs=spec.cluster.slurm.jobs)
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


def dry_run(spec: StudySpec, *, gpus: list[int] | None = None) -> str:
    """What the study's cluster would run, as text: a job script, a manifest, or the local workers."""
    import yaml

    if spec.cluster.backend == "slurm":
        return slurm_job_script(spec)
    if spec.cluster.backend == "kubernetes":
        return yaml.safe_dump(kubernetes_manifest(spec), sort_keys=False)
    from hpsearch.cluster._local import worker_specs

    size = int(spec.objective.gpus_per_trial or 1)
    if spec.cluster.scheduler:
        return (
            f"existing Dask scheduler {spec.cluster.scheduler}: trials go to its workers; start them "
            f"on each node with: hpsearch worker {spec.cluster.scheduler} --gpus auto --gpus-per-trial {size}"
        )
    specs, plan = worker_specs(gpus=gpus, gpus_per_trial=int(spec.objective.gpus_per_trial or 1))
    lines = [f"local cluster: {len(specs)} worker processes on 127.0.0.1 ({plan.describe()})"]
    for name, worker in specs.items():
        opts = worker["options"]
        lines.append(
            f"  {name}: resources {opts['resources']}, env {dict((k, v) for k, v in opts['env'].items() if k.startswith(('HPSEARCH', 'CUDA')))}"
        )
    return "\n".join(lines)
