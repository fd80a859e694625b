"""How well a rung's ranking predicts the last epoch's, measured on the study's own trials,
and the share of new trials each bracket gets from it (``asha: {brackets: auto}``).

A bracket ``b`` of the ladder ``L = rung_epochs(min_epochs, eta, max_epochs)`` starts its
trials at ``L[b]``; bracket ``len(L)`` trains them to the last epoch without pausing (random
search). Those unpaused trials are never selected, so each of them gives an unbiased pair
(its value at ``L[k]``, its value at the last epoch) for every rung ``k``. For each rung:

- the *survival of the top*: of the top ``1/eta**2`` at the last epoch, how many were in the
  top ``1/eta`` at ``L[k]`` (where asha would have promoted them), with a Beta posterior
  (prior :data:`PRIOR`: before any evidence, early rungs are trusted);
- Spearman's rank correlation with a Fisher-z 95 % interval (shown, not used to decide).

A bracket's yield is the expected number of the truly best configurations it brings to the
last epoch per epoch trained: ``prod(survival[k] for k >= b) / cost(b)``, ``cost(b)`` the
expected epochs a configuration of bracket ``b`` trains (with ``1/eta`` promoted at each
rung). The best bracket gets the new trials; unpaused trials keep a share :data:`PROBE` of the
epochs, so that the measure goes on (they are random search's trials, not lost), and the
first ``eta**2`` trials of a study train unpaused (the first estimate needs that many; a
small study gives them at most a quarter of its trials).

The model is then checked against what the brackets brought to the last epoch
(:func:`passed_over`): the top ``1/eta**2`` of every trial that reached it, per epoch each
bracket spent. Where early epochs rank a random sample well but mislead among the very
best, the paused brackets' finishers fall behind the unpaused ones; such a bracket is passed
over, and the model, refuted at the study's scale, chooses only among the brackets measured
there (random search unless another bracket has trials at the last epoch).

Everything is a pure function of the pairs and the last epoch's values; :class:`Deficit`
spreads trials over brackets by weight without a random draw, so a simulated study is
reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Beta prior of a rung's survival (pseudo-hits, pseudo-misses): mean 2/3, worth 1.5 of the
#: top (two misses of two move a rung below 0.3: early rungs are trusted until they fail).
PRIOR = (1.0, 0.5)
#: The share of the epochs kept for unpaused trials (the measure) when another bracket wins.
PROBE = 0.1


@dataclass(frozen=True)
class RungEstimate:
    """What the unpaused trials say of one rung: ``hits`` of the ``top`` best at the last
    epoch were in the rung's top ``1/eta``, over ``pairs`` trials; ``rho`` (None below 4
    pairs) with its 95 % interval."""

    epoch: int
    pairs: int
    top: int
    hits: int
    rho: float | None = None
    rho_low: float | None = None
    rho_high: float | None = None

    @property
    def survival(self) -> float:
        """The posterior mean of the survival of the top."""
        a, b = PRIOR
        return (a + self.hits) / (a + b + self.top)

    def interval(self) -> tuple[float, float]:
        """A 90 % interval of the survival (normal approximation of the Beta posterior)."""
        a, b = PRIOR[0] + self.hits, PRIOR[1] + self.top - self.hits
        mean, n = a / (a + b), a + b
        half = 1.645 * math.sqrt(mean * (1 - mean) / (n + 1))
        return max(0.0, mean - half), min(1.0, mean + half)


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks 0..n-1 (ties: their mean rank)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Spearman's rho of the pairs with a Fisher-z 95 % interval (None below 4 pairs).

    >>> round(spearman([(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)])[0], 6)
    1.0
    """
    n = len(pairs)
    if n < 4:
        return None
    rx, ry = _ranks([p[0] for p in pairs]), _ranks([p[1] for p in pairs])
    mean = (n - 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(rx, ry, strict=True))
    sx = math.sqrt(sum((x - mean) ** 2 for x in rx))
    sy = math.sqrt(sum((y - mean) ** 2 for y in ry))
    rho = cov / (sx * sy) if sx and sy else 0.0
    z = math.atanh(max(-0.999999, min(0.999999, rho)))
    half = 1.96 / math.sqrt(n - 3) if n > 3 else math.inf
    return rho, math.tanh(z - half), math.tanh(z + half)


def estimate_rung(
    epoch: int, pairs: Sequence[tuple[float, float]], eta: int, maximize: bool
) -> RungEstimate:
    """The survival of the top from ``pairs`` (value at ``epoch``, value at the last epoch).

    >>> estimate_rung(1, [(i, i) for i in range(18)], 3, True).hits  # perfect: the top 2
    2
    >>> estimate_rung(1, [(-i, i) for i in range(18)], 3, True).hits  # inverted
    0
    """
    n = len(pairs)
    sign = -1.0 if maximize else 1.0
    top = n // eta**2
    kept = n // eta
    early = sorted(range(n), key=lambda i: (sign * pairs[i][0], i))[:kept]
    late = sorted(range(n), key=lambda i: (sign * pairs[i][1], i))[:top]
    hits = len(set(early) & set(late))
    rho = spearman(pairs)
    low = high = None
    if rho is not None:
        rho_value, low, high = rho
    return RungEstimate(epoch, n, top, hits, rho_value if rho else None, low, high)


def bracket_costs(ladder: Sequence[int], eta: int, max_epochs: int) -> list[float]:
    """Expected epochs a configuration of each bracket trains (the top ``1/eta`` of a rung
    goes on); the last bracket trains every configuration to ``max_epochs``.

    >>> [round(c, 2) for c in bracket_costs([1, 3, 9, 27], 3, 52)]
    [3.31, 7.93, 17.78, 35.33, 52.0]
    """
    out = []
    top = [*ladder, max_epochs]
    for b in range(len(ladder) + 1):
        cost = float(top[b])
        for j in range(b, len(ladder)):
            cost += (top[j + 1] - top[j]) / eta ** (j - b + 1)
        out.append(cost)
    return out


def bracket_yields(survival: Sequence[float], costs: Sequence[float]) -> list[float]:
    """The best configurations each bracket brings to the last epoch per epoch trained:
    ``prod(survival[b:]) / costs[b]``."""
    out = []
    for b, cost in enumerate(costs):
        out.append(math.prod(survival[b:]) / cost)
    return out


def bracket_weights(best: int, costs: Sequence[float], probe: float = PROBE) -> list[float]:
    """The share of new trials of each bracket: the ``best`` one all but ``probe`` of the
    epochs, the last (unpaused) bracket ``probe`` of them.

    >>> [round(w, 3) for w in bracket_weights(0, [3.31, 7.93, 17.78, 35.33, 52.0])]
    [0.993, 0.0, 0.0, 0.0, 0.007]
    """
    last = len(costs) - 1
    epochs = [0.0] * len(costs)
    epochs[best] += 1.0 - (probe if best != last else 0.0)
    if best != last:
        epochs[last] += probe
    trials = [e / c for e, c in zip(epochs, costs, strict=True)]
    total = sum(trials)
    return [t / total for t in trials]


class Deficit:
    """Deterministic weighted round-robin: the first ``first`` picks are the last bracket's
    (the measure needs them soonest); then each pick credits every bracket its weight and
    takes the one with the most credit (ties: the lowest bracket).

    >>> d = Deficit(2, first=1)
    >>> [d.pick([0.75, 0.25]) for _ in range(6)]
    [1, 0, 0, 1, 0, 0]
    """

    def __init__(self, n: int, *, first: int = 0) -> None:
        self.credit = [0.0] * n
        self.first = first

    def pick(self, weights: Sequence[float]) -> int:
        if self.first > 0:
            self.first -= 1
            return len(weights) - 1
        for b, w in enumerate(weights):
            self.credit[b] += w
        best = max(range(len(weights)), key=lambda b: (self.credit[b], -b))
        self.credit[best] -= 1.0
        return best


@dataclass(frozen=True)
class Outcome:
    """What one bracket brought to the last epoch: ``finished`` trials, ``top`` of them in
    the study's top ``1/eta**2`` of every trial that reached the last epoch."""

    finished: int
    top: int


def outcomes(finals: Sequence[tuple[int, float]], eta: int, maximize: bool) -> dict[int, Outcome]:
    """Per bracket, from ``(bracket, last epoch's value)`` of every trial that reached it.

    >>> outcomes([(0, 0.9), (0, 0.5), (4, 0.8)] + [(4, 0.1)] * 6, 3, True)
    {0: Outcome(finished=2, top=1), 4: Outcome(finished=7, top=0)}
    """
    sign = -1.0 if maximize else 1.0
    order = sorted(range(len(finals)), key=lambda i: (sign * finals[i][1], i))
    top = set(order[: max(1, len(finals) // eta**2)])
    out: dict[int, list[int]] = {}
    for i, (bracket, _) in enumerate(finals):
        counts = out.setdefault(bracket, [0, 0])
        counts[0] += 1
        counts[1] += i in top
    return {b: Outcome(f, t) for b, (f, t) in sorted(out.items())}


def finisher_costs(costs: Sequence[float], eta: int) -> list[float]:
    """Expected epochs a bracket spends for each trial it brings to the last epoch (it
    promotes ``1/eta`` at each of its rungs).

    >>> [round(c) for c in finisher_costs([3.31, 7.93, 17.78, 35.33, 52.0], 3)]
    [268, 214, 160, 106, 52]
    """
    last = len(costs) - 1
    return [c * eta ** (last - b) for b, c in enumerate(costs)]


def passed_over(
    seen: dict[int, Outcome], costs: Sequence[float], eta: int, level: float = 0.05
) -> list[int]:
    """The brackets whose measured yield falls short of the unpaused bracket's: the top
    trials each brought to the last epoch, per epoch it spent, where the unpaused bracket
    (the last) has at least ``eta`` of them. A bracket with ``eta**2`` trials at the last
    epoch is passed over when, at the unpaused bracket's rate, so few top trials would come
    with probability below ``level`` (Poisson).

    >>> costs = finisher_costs([3.31, 7.93, 17.78, 35.33, 52.0], 3)
    >>> passed_over({0: Outcome(64, 3), 4: Outcome(60, 11)}, costs, 3)
    [0]
    >>> passed_over({0: Outcome(31, 5), 4: Outcome(20, 0)}, costs, 3)
    []
    """
    last = len(costs) - 1
    unpaused = seen.get(last)
    if unpaused is None or unpaused.top < eta:
        return []
    rate = unpaused.top / (unpaused.finished * costs[last])
    out = []
    for b, o in seen.items():
        if b == last or o.finished < eta**2:
            continue
        if _poisson_cdf(o.top, rate * o.finished * costs[b]) < level:
            out.append(b)
    return out


def _poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for X ~ Poisson(mean)."""
    term = total = math.exp(-mean)
    for i in range(1, k + 1):
        term *= mean / i
        total += term
    return total
