"""Compare search methods on a simulated cluster: a grid of methods, worker counts and seeds,
and the any-time regret of each (the best value found by each virtual second, against the
benchmark's best), as an interquartile mean with a bootstrap 95 % interval.

A method is a sampler with a pruner or a scheduler: ``random``, ``tpe``, ``tpe+hyperband``
(Optuna's Hyperband pruner), ``random+asha``, ``tpe+asha``, ``pbt``; ``hyperband`` and
``asha`` alone mean random sampling with it, as in the papers that introduced them.
``asha-N`` and ``asha-auto`` (also ``tpe+asha-4``...) set ``asha.brackets``.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from hpsearch.trial import OutcomeState

if TYPE_CHECKING:
    from hpsearch.simulation._run import Simulation
    from hpsearch.spec import StudySpec

SAMPLERS = ("random", "tpe")
STRATEGIES = ("none", "hyperband", "median", "asha", "pbt")


def method_overrides(method: str) -> dict[str, Any]:
    """The search settings of a method name (``tpe+asha``, ``hyperband``, ``pbt``, ...).

    >>> method_overrides("tpe+hyperband")
    {'sampler': 'tpe', 'pruner': 'hyperband', 'scheduler': 'none'}
    >>> method_overrides("asha")
    {'sampler': 'random', 'pruner': 'none', 'scheduler': 'asha'}
    >>> method_overrides("asha-4")["asha"]
    {'brackets': 4}
    """
    base, dash, brackets = method.rpartition("-")
    if dash and base.endswith("asha") and (brackets == "auto" or brackets.isdigit()):
        out = method_overrides(base)
        out["asha"] = {"brackets": brackets if brackets == "auto" else int(brackets)}
        return out
    sampler, _, strategy = method.partition("+")
    if sampler not in SAMPLERS:  # a strategy alone: with random sampling
        sampler, strategy = "random", method
    strategy = strategy or "none"
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown method {method!r}: a sampler ({', '.join(SAMPLERS)}), a strategy "
            f"({', '.join(STRATEGIES[1:])}) or both as SAMPLER+STRATEGY"
        )
    if strategy in ("asha", "pbt"):
        return {"sampler": sampler, "pruner": "none", "scheduler": strategy}
    return {"sampler": sampler, "pruner": strategy, "scheduler": "none"}


def variant(spec: StudySpec, *, method: str, workers: int, seed: int) -> StudySpec:
    """``spec`` with a method, a worker count and a seed (of the sampler and the losses)."""
    from hpsearch.spec import StudySpec

    data = spec.to_dict()
    search = {**data["search"], **method_overrides(method), "seed": seed}
    for key in ("asha", "pbt"):
        if key != search["scheduler"]:
            search.pop(key, None)
    data["search"] = search
    simulated = dict(data["cluster"].get("simulated") or {})
    data["cluster"]["simulated"] = {**simulated, "workers": workers, "seed": seed}
    return StudySpec.from_dict(data)


def anytime(sim: Simulation, maximize: bool) -> list[tuple[float, float]]:
    """The best final value found by each virtual second: ``(time, best)`` at each change."""
    ended = {s["trial"]: s["end"] for s in sim.segments if s["state"] == OutcomeState.COMPLETE}
    points = sorted(
        (ended[t.number], t.value)
        for t in sim.study.get_trials(deepcopy=False)
        if t.state == TrialState.COMPLETE and t.value is not None and t.number in ended
    )
    out: list[tuple[float, float]] = []
    for when, value in points:
        if not out or (value > out[-1][1] if maximize else value < out[-1][1]):
            out.append((when, value))
    return out


def regret_at(curve: list[tuple[float, float]], when: float, best: float, maximize: bool) -> float:
    """The normalised regret at ``when``: how far the best found is from the benchmark's best,
    as a fraction of it (1 before anything completed)."""
    found = [v for t, v in curve if t <= when]
    if not found:
        return 1.0
    gap = (best - found[-1]) if maximize else (found[-1] - best)
    return max(0.0, gap) / max(abs(best), 1e-12)


def iqm(values: list[float]) -> float:
    """The interquartile mean: the mean of the middle half.

    >>> iqm([0, 1, 2, 3, 4, 5, 6, 100])
    3.5
    """
    ordered = sorted(values)
    n = len(ordered)
    middle = ordered[n // 4 : n - n // 4] or ordered
    return sum(middle) / len(middle)


def bootstrap(values: list[float], *, rounds: int = 1000, seed: int = 0) -> tuple[float, float]:
    """A 95 % interval of the interquartile mean, by resampling the seeds."""
    rng = random.Random(seed)
    means = sorted(iqm(rng.choices(values, k=len(values))) for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


@dataclass
class Cell:
    """One method at one worker count: its any-time regret over the seeds."""

    method: str
    workers: int
    times: list[float]
    regret: list[list[float]]  # per time, the seeds' regrets
    wall_s: float  # the machine's seconds of all its simulations
    trials: float  # trials per simulation, on average

    def summary(self, index: int = -1) -> tuple[float, float, float]:
        """IQM and its 95 % interval at ``times[index]``."""
        values = self.regret[index]
        low, high = bootstrap(values)
        return iqm(values), low, high


def run_grid(
    spec: StudySpec,
    *,
    methods: Iterable[str],
    workers: Iterable[int],
    seeds: int,
    points: int = 60,
    on_run: Callable[[str, int, int], None] | None = None,
) -> list[Cell]:
    """Simulate every method at every worker count with seeds 0..seeds-1; each cell's regret
    on ``points`` virtual times up to the study's ``search.timeout`` (virtual seconds: no
    trial starts after it), else up to the slowest run's end at that worker count."""
    from hpsearch.data.surrogates import benchmark_of
    from hpsearch.simulation._run import simulate
    from hpsearch.spec import surrogate_instance

    bench = benchmark_of(spec.objective.model, spec.objective.dataset, spec.source)
    instance, _ = surrogate_instance(bench, spec.objective.dataset)
    best = bench.best(str(instance), metric=spec.metric)
    maximize = spec.direction.value == "maximize"
    cells: list[Cell] = []
    for n in workers:
        runs: dict[str, list[tuple[list[tuple[float, float]], float, int]]] = {}
        for method in methods:
            for seed in range(seeds):
                if on_run is not None:
                    on_run(method, n, seed)
                one = variant(spec, method=method, workers=n, seed=seed)
                with tempfile.TemporaryDirectory(prefix="hpsearch-sim-") as folder:
                    sim = simulate(one, study_dir=folder)
                trials = len(sim.study.get_trials(deepcopy=False))
                runs.setdefault(method, []).append((anytime(sim, maximize), sim.wall_s, trials))
        horizon = spec.search.timeout or max(
            (c[-1][0] for r in runs.values() for c, _, _ in r if c), default=1.0
        )
        times = [horizon * (i + 1) / points for i in range(points)]
        for method, results in runs.items():
            regret = [[regret_at(c, t, best, maximize) for c, _, _ in results] for t in times]
            wall = sum(w for _, w, _ in results)
            mean_trials = sum(t for _, _, t in results) / len(results)
            cells.append(Cell(method, n, times, regret, wall, mean_trials))
    return cells


def plot(cells: list[Cell], workers: int, title: str, *, share: bool = False) -> Any:
    """The any-time regret of each method at ``workers`` workers (IQM, 95 % band), log scale;
    against simulated hours, or with ``share`` against the share of the time budget (cells
    pooled over benchmarks of different budgets)."""
    from hpsearch._plotting import _figure

    fig, ax = _figure(f"{title}: {workers} workers")
    for cell in (c for c in cells if c.workers == workers):
        n = len(cell.times)
        hours = [(i + 1) / n for i in range(n)] if share else [t / 3600 for t in cell.times]
        stats = [cell.summary(i) for i in range(len(cell.times))]
        ax.plot(hours, [max(s[0], 1e-6) for s in stats], label=cell.method)
        ax.fill_between(
            hours, [max(s[1], 1e-6) for s in stats], [max(s[2], 1e-6) for s in stats], alpha=0.2
        )
    ax.set_xlabel("share of the simulated time budget" if share else "simulated hours")
    ax.set_ylabel("normalised regret (IQM)")
    ax.set_yscale("log")
    ax.legend()
    return fig
