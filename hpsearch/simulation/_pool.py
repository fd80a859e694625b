"""Several studies sharing one simulated pool: the device pool's own arbitration
(:class:`hpsearch.cluster.pool._fair.PoolState`, the code the Dask scheduler extension runs) on
virtual time, each study's own coordinator leasing devices from it, trials yielding at their
next epoch end when the pool wants devices back, as on a real pool.

Each study's :class:`SimLease` stands where a real one talks to the scheduler: it joins,
sends its heartbeat every ``HEARTBEAT_S`` virtual seconds (with the demand the coordinator
last said), acquires and releases leases, and reads what the pool asks back.
"""

from __future__ import annotations

import functools
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from hpsearch.cluster.pool import PoolState
    from hpsearch.simulation._cluster import SimCluster
    from hpsearch.spec import StudySpec


class SimLease:
    """A study's leases on the simulated pool: what :class:`hpsearch.cluster.pool._lease.PoolLease`
    does over Dask, on the pool's state directly and the virtual clock."""

    def __init__(self, pool: PoolState, cluster: SimCluster, study: str, spec: StudySpec) -> None:
        from hpsearch.cluster.pool import HEARTBEAT_S

        self.pool, self.cluster, self.study = pool, cluster, study
        self.heartbeat_s = HEARTBEAT_S
        share = spec.share
        pool.join(
            study,
            cluster.now,
            weight=share.weight,
            priority=share.priority,
            max_devices=share.max_devices,
        )
        self.resource = cluster.resource_key
        self.capacity = pool.capacity
        self._held: dict[str, float] = {}
        self._demand = (0.0, 1.0)
        self._beat_at = -1e18
        self.asked_total = 0.0
        self.reason = ""
        self.share = 0.0

    def want(self, demand: float, next_size: float) -> None:
        self._demand = (demand, next_size)
        if self.cluster.now - self._beat_at >= self.heartbeat_s:
            self._beat_at = self.cluster.now
            answer = self.pool.heartbeat(self.study, self.cluster.now, demand, next_size)
            self.asked_total = max(self.asked_total, float(answer.get("yield_total", 0.0)))
            self.reason = str(answer.get("reason") or "")
            self.share = float(answer.get("share", 0.0))

    def acquire(self, key: str, size: float) -> bool:
        if key in self._held:
            return True
        granted = self.pool.acquire(self.study, key, size, self.cluster.now, self._demand[0])
        if granted:
            self._held[key] = size
        return granted

    def release(self, key: str) -> None:
        if self._held.pop(key, None) is not None:
            self.pool.release(self.study, key, self.cluster.now)

    def held(self) -> float:
        return sum(self._held.values())

    def close(self) -> None:
        self.pool.leave(self.study, self.cluster.now)


@dataclass
class PoolSimulation:
    """What a shared pool did: each study's run, and the pool's devices over time."""

    studies: list[optuna.Study]
    arrivals: list[float]
    ends: list[float]
    held: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # sampled
    wall_s: float = 0.0

    def mean_held(self, start: float, end: float) -> dict[str, float]:
        """Each study's devices held, on average over the samples in ``[start, end)``."""
        window = [h for t, h in self.held if start <= t < end]
        names = {n for _, h in self.held for n in h}
        return {n: sum(h.get(n, 0.0) for h in window) / max(1, len(window)) for n in names}


def simulate_pool(
    specs: list[StudySpec],
    *,
    arrivals: list[float] | None = None,
    workers: int,
    gpus_per_worker: int = 1,
    seed: int = 0,
    sample_every: float = 10.0,
) -> PoolSimulation:
    """Run ``specs`` (surrogate studies; their ``cluster`` sections are not used) on one
    simulated pool of ``workers`` x ``gpus_per_worker`` devices, study ``i`` arriving at
    ``arrivals[i]`` virtual seconds; sample the devices each study holds every
    ``sample_every`` seconds."""
    import optuna

    from hpsearch.cluster.pool import PoolState
    from hpsearch.data.surrogates import benchmark_of
    from hpsearch.search import build_pruner, build_sampler
    from hpsearch.search.pareto import study_directions
    from hpsearch.simulation._cluster import SimCluster
    from hpsearch.simulation._kernel import Kernel
    from hpsearch.simulation._run import coordinator_on
    from hpsearch.simulation._trial import TrialRunner
    from hpsearch.spec import surrogate_instance

    started = time.perf_counter()
    arrivals = arrivals or [0.0] * len(specs)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runners: dict[str, TrialRunner] = {}
    cluster = SimCluster(
        workers=workers,
        devices=gpus_per_worker,
        seed=seed,
        start_segment=lambda f, w: runners[f.task.study_name].start(f, w),
    )
    pool = PoolState(ttl_s=1e18)  # a coordinator here never dies without leaving
    pool.capacity = float(workers * gpus_per_worker)
    kernel = cluster.kernel = Kernel(cluster)
    out = PoolSimulation([], list(arrivals), [0.0] * len(specs))
    scratch = tempfile.TemporaryDirectory(prefix="hpsearch-pool-")  # the yield requests
    folder = Path(scratch.name)
    studies = []
    for spec in specs:
        study = optuna.create_study(
            study_name=spec.name,
            sampler=build_sampler(spec),
            pruner=build_pruner(spec),
            **study_directions(spec),
        )
        bench = benchmark_of(spec.objective.model, spec.objective.dataset, spec.source)
        instance, _ = surrogate_instance(bench, spec.objective.dataset)
        runner = runners[spec.name] = TrialRunner(spec, study, bench, instance=str(instance))
        runner.cluster, runner.pooled = cluster, True
        studies.append(study)
    out.studies = studies

    def sample() -> None:
        out.held.append((cluster.now, {c.name: c.held for c in pool.studies.values()}))
        if not all(out.ends):
            cluster.at(cluster.now + sample_every, sample)

    cluster.at(0.0, sample)

    def body(index: int) -> Any:
        spec, study = specs[index], studies[index]
        kernel.sleep_until(arrivals[index])
        lease = SimLease(pool, cluster, spec.name, spec)
        coordinator = coordinator_on(cluster, spec, study, folder / spec.name, lease=lease)
        try:
            return coordinator.run()
        finally:
            out.ends[index] = cluster.now

    with scratch:
        kernel.run([functools.partial(body, i) for i in range(len(specs))])
    out.wall_s = time.perf_counter() - started
    return out
