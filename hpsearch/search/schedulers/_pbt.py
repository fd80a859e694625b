"""Population-based training (Jaderberg et al., "Population Based Training of Neural
Networks", 2017), generation by generation.

The sampler gives the population's first ``population`` trials. Each trains to the next
interval (every ``interval_epochs`` epochs) and pauses there, its checkpoint written and its
set freed. When every living member has reached the interval, the members are ranked by
their value there: the bottom ``int(quantile * n)`` end PRUNED, each replaced by a new trial
(a continuation) that starts from the checkpoint of a member of the top ``int(quantile * n)``
at that epoch, with that member's parameters perturbed (:func:`perturb`); the others go on.
A continuation is an Optuna trial of its own, with the user attributes ``parent_trial`` and
``from_epoch``.

``search.n_trials`` counts every trial, the first members and the continuations: once it is
spent, bottom members go on instead of being replaced. A member that fails ends its line.

The decisions are pure functions of the values at the intervals and of a random generator
seeded by ``search.seed``, the epoch and the member, so a study is reproducible and a
restarted coordinator rebuilds the state from the study (:meth:`PbtScheduler.restore`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from hpsearch.search._optuna import trial_id_of
from hpsearch.search.schedulers._asha import ranked
from hpsearch.search.schedulers._base import (
    FROM_EPOCH,
    PARENT_TRIAL,
    PAUSED_AT,
    TARGET,
    Adaptation,
    Ended,
    Job,
)

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial


def exploit(
    values: Mapping[int, float], quantile: float, maximize: bool
) -> tuple[list[int], list[int]]:
    """The members of an interval to replace (worst first) and those to copy from (best
    first): the bottom and top ``int(quantile * len(values))``.

    >>> exploit({0: 0.9, 1: 0.5, 2: 0.7, 3: 0.6}, 0.25, True)
    ([1], [0])
    >>> exploit({0: 0.9, 1: 0.5, 2: 0.7, 3: 0.6, 4: 0.8}, 0.5, False)
    ([0, 4], [1, 3])
    >>> exploit({0: 0.9, 1: 0.5, 2: 0.7}, 0.25, True)
    ([], [])
    """
    order = ranked(values, maximize)
    k = int(quantile * len(order))
    return (order[::-1][:k], order[:k]) if k else ([], [])


def snap(value: float, dist: BaseDistribution) -> float | int:
    """``value`` clipped to a float or int distribution's bounds, on its step grid.

    >>> from optuna.distributions import FloatDistribution, IntDistribution
    >>> snap(0.23, FloatDistribution(0.0, 0.5, step=0.1)), snap(9.0, IntDistribution(1, 8))
    (0.2, 8)
    >>> log = FloatDistribution(1e-4, 1.0, log=True)
    >>> snap(70.0, IntDistribution(32, 128, step=32)), snap(1e-6, log)
    (64, 0.0001)
    """
    from optuna.distributions import IntDistribution

    low, high = dist.low, dist.high  # type: ignore[attr-defined]
    step = dist.step  # type: ignore[attr-defined]
    value = min(max(value, low), high)
    if step is not None:
        last = math.floor((high - low) / step + 1e-9)
        value = round(low + min(max(round((value - low) / step), 0), last) * step, 12)
    if isinstance(dist, IntDistribution):
        return int(min(max(round(value), low), high))
    return float(value)


def resample(dist: BaseDistribution, rng: random.Random) -> Any:
    """A value drawn afresh from ``dist`` (log scale and step respected)."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(dist, CategoricalDistribution):
        return rng.choice(list(dist.choices))
    low, high = dist.low, dist.high  # type: ignore[attr-defined]
    if dist.log:  # type: ignore[attr-defined]
        return snap(math.exp(rng.uniform(math.log(low), math.log(high))), dist)
    return snap(rng.uniform(low, high), dist)


def perturb(
    params: Mapping[str, Any],
    distributions: Mapping[str, BaseDistribution],
    rng: random.Random,
    *,
    factors: tuple[float, float],
    resample_probability: float,
    names: Sequence[str],
) -> dict[str, Any]:
    """``params`` explored: each of ``names`` is drawn afresh from its distribution with
    ``resample_probability``, else a number is multiplied by one of ``factors`` (clipped to
    its bounds, on its step grid) and a categorical is drawn afresh; the rest are kept.

    >>> from optuna.distributions import FloatDistribution
    >>> dist = {"lr": FloatDistribution(1e-4, 1e-1, log=True)}
    >>> perturb({"lr": 0.01}, dist, random.Random(0), factors=(0.8, 1.2),
    ...         resample_probability=0.0, names=["lr"])
    {'lr': 0.012}
    """
    from optuna.distributions import CategoricalDistribution

    out = dict(params)
    for name in names:
        dist = distributions.get(name)
        if dist is None or name not in out:
            continue
        if rng.random() < resample_probability or isinstance(dist, CategoricalDistribution):
            out[name] = resample(dist, rng)
        else:
            out[name] = snap(float(out[name]) * rng.choice(factors), dist)
    return out


def default_mutations(distributions: Mapping[str, BaseDistribution]) -> list[str]:
    """The parameters a continuation perturbs unless told: the float ones."""
    from optuna.distributions import FloatDistribution

    return [name for name, d in distributions.items() if isinstance(d, FloatDistribution)]


class PbtScheduler:
    """Population-based training over ``population`` lines, exploiting every
    ``interval_epochs`` epochs once every living member reached the interval."""

    snapshots = True  # the continuations of an interval copy its members' checkpoints

    def __init__(
        self,
        *,
        population: int,
        interval_epochs: int,
        quantile: float,
        perturb: tuple[float, float],
        resample_probability: float,
        distributions: Mapping[str, BaseDistribution],
        mutate: Sequence[str] | None,
        n_trials: int,
        max_epochs: int,
        maximize: bool,
        params_of: Callable[[int], Mapping[str, Any]],
        seed: int | None = 0,
        metric: str = "value",
    ) -> None:
        self.population = population
        self.interval = interval_epochs
        self.quantile = quantile
        self.factors = perturb
        self.resample_probability = resample_probability
        self.distributions = dict(distributions)
        self.mutate = list(mutate) if mutate is not None else default_mutations(distributions)
        self.n_trials = n_trials
        self.max_epochs = max_epochs
        self.maximize = maximize
        self.metric = metric
        self.params_of = params_of  # trial id -> its parameters (read from the study)
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.asked = 0  # members the sampler gave
        self.created = 0  # trials in the study, continuations included
        self.living = 0  # members running or paused
        self.waiting: dict[int, dict[int, tuple[int, float]]] = {}  # epoch -> number -> (id, v)
        self._decided: list[Job] = []

    def _next_stop(self, epoch: int) -> int | None:
        nxt = epoch + self.interval
        return nxt if nxt < self.max_epochs else None

    def rng(self, epoch: int, number: int) -> random.Random:
        """The random choices of one replacement: the same for the same seed, epoch and member."""
        return random.Random(f"pbt:{self.seed}:{epoch}:{number}")

    # ------------------------------------------------------------------ the hooks

    def budget(self, n_trials: int) -> int:
        return min(self.population, n_trials)

    def stop_at(self, number: int) -> int | None:
        self.asked += 1
        self.created += 1
        self.living += 1
        return self._next_stop(0)

    def paused(self, number: int, trial_id: int, epoch: int, value: float) -> None:
        self.waiting.setdefault(epoch, {})[number] = (trial_id, value)
        self._decide()

    def ended(self, number: int, state: TrialState) -> None:
        self.living = max(0, self.living - 1)
        self._decide()

    def decided(self) -> list[Job]:
        out, self._decided = self._decided, []
        return out

    def observe(self, number: int, reported: Callable[[], Mapping[int, float]]) -> None:
        pass  # its exploitation ranks the population as it is

    def trial_attrs(self, number: int) -> dict[str, Any]:
        return {}

    def adaptations(self) -> list[Adaptation]:
        return []

    def next(self) -> Job | None:
        return None  # everything is decided at once, when a generation is complete

    def closing(self, asking: bool) -> list[Ended]:
        """Nothing in flight: a generation that cannot fill any more (the sampler gave fewer
        members than the population) is decided with the members it has."""
        if not asking:
            self._decide(force=True)
        return []

    # ------------------------------------------------------------------ decisions

    def _decide(self, force: bool = False) -> None:
        while self.waiting:
            epoch = min(self.waiting)
            members = self.waiting[epoch]
            full = len(members) >= self.living and self.asked >= self.budget(self.n_trials)
            if not (full or force):
                return
            del self.waiting[epoch]
            self._decided += self.generation(epoch, members)

    def generation(self, epoch: int, members: Mapping[int, tuple[int, float]]) -> list[Job]:
        """The jobs of one interval: a continuation for each bottom member (while the budget
        lasts), the others resumed to the next interval."""
        values = {number: value for number, (_, value) in members.items()}
        bottom, top = exploit(values, self.quantile, self.maximize)
        stop = self._next_stop(epoch)
        jobs: list[Job] = []
        for number in sorted(members):
            trial_id = members[number][0]
            if number not in bottom or self.created >= self.n_trials:
                jobs.append(Job(number, trial_id, stop))
                continue
            rng = self.rng(epoch, number)
            parent = rng.choice(top)
            params = perturb(
                self.params_of(members[parent][0]),
                self.distributions,
                rng,
                factors=self.factors,
                resample_probability=self.resample_probability,
                names=self.mutate,
            )
            self.created += 1
            reason = (
                f"pbt: replaced at epoch {epoch} by a continuation of trial {parent}: "
                f"{self.metric} {values[number]:.6g} in the bottom {len(bottom)} of the "
                f"{len(values)} trials at the interval (top {values[top[-1]]:.6g} and better)"
            )
            jobs.append(
                Job(
                    None,
                    None,
                    stop,
                    params=params,
                    attrs={PARENT_TRIAL: parent, FROM_EPOCH: epoch},
                    copy_from=parent,
                    replaces=Ended(number, trial_id, TrialState.PRUNED, reason),
                )
            )
        return jobs

    # ------------------------------------------------------------------ restart

    def restore(self, trials: Sequence[FrozenTrial]) -> list[Job]:
        """Rebuild the population from the study: members paused at an interval wait for
        their generation again; members that were running (or decided to go on) run again
        to their target."""
        again: list[Job] = []
        for t in trials:
            if t.state == TrialState.WAITING:
                continue
            self.created += 1
            self.asked += PARENT_TRIAL not in t.user_attrs
            if t.state != TrialState.RUNNING:
                continue
            self.living += 1
            target = t.user_attrs.get(TARGET)
            paused_at = t.user_attrs.get(PAUSED_AT)
            if paused_at is not None and (target is None or int(target) <= int(paused_at)):
                value = t.intermediate_values.get(int(paused_at))
                if value is not None:
                    self.waiting.setdefault(int(paused_at), {})[t.number] = (trial_id_of(t), value)
                    continue
            if target is not None:
                stop = int(target) if int(target) < self.max_epochs else None
            else:
                stop = self._next_stop(int(t.user_attrs.get(FROM_EPOCH, 0)))
            again.append(Job(t.number, trial_id_of(t), stop))
        self._decide()
        return again
