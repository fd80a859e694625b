"""ASHA whose brackets follow the study's evidence (``asha: {brackets: auto}``, the default).

Trials are spread over the brackets of the ladder ``rung_epochs(min_epochs, eta, max_epochs)``
plus one bracket that trains without pausing; the share of each comes from how well each
rung's ranking predicts the last epoch's, measured on the unpaused trials
(:mod:`._estimate`). Where early rungs predict, nearly every trial starts at the first rung
(one-bracket asha); where they do not, trials start at the rung that pays most, down to
random search. Promotion and pause are asha's, per bracket.

A trial's bracket is recorded in the study (:data:`BRACKET`) when it is first submitted, so a
restarted coordinator rebuilds the brackets and the estimate from the study's trials. A study
begun before ``brackets: auto`` existed (its trials have a target epoch, none a bracket) goes
on with one bracket, as it began.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from hpsearch.search.schedulers._asha import AshaScheduler, _Bracket, rung_epochs
from hpsearch.search.schedulers._base import TARGET, Adaptation, Job
from hpsearch.search.schedulers._estimate import (
    Deficit,
    Outcome,
    RungEstimate,
    bracket_costs,
    bracket_weights,
    bracket_yields,
    estimate_rung,
    finisher_costs,
    outcomes,
    passed_over,
)

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

#: User attribute of a trial: its bracket (``brackets: auto``).
BRACKET = "hpsearch.bracket"
#: Study user attributes: the current estimate (a mapping) and the decisions' lines.
ESTIMATE = "hpsearch.asha_estimate"
DECISIONS = "hpsearch.asha_decisions"


@dataclass
class _Evidence:
    """The unpaused trials' values at each rung and at the last epoch."""

    pairs: list[list[tuple[float, float]]]
    seen: set[int] = field(default_factory=set)
    # The last epoch's value of every trial that reached it, from any bracket: what each
    # bracket brought there (the check of the estimate).
    finals: dict[int, float] = field(default_factory=dict)
    estimated_at: int = 0  # how many trials the last estimate counted

    def due(self) -> bool:
        """Whether to estimate again: on every new trial up to 30, then every tenth more."""
        n = len(self.seen)
        return n > self.estimated_at and (n < 30 or n >= self.estimated_at * 1.1)


class AdaptiveAshaScheduler(AshaScheduler):
    """asha over the brackets of the ladder and one unpaused bracket, new trials spread by
    the measured survival of the top (see the module)."""

    def __init__(
        self,
        *,
        min_epochs: int,
        reduction_factor: int,
        max_epochs: int,
        maximize: bool,
        metric: str = "value",
        n_trials: int | None = None,
    ) -> None:
        self.ladder = rung_epochs(min_epochs, reduction_factor, max_epochs)
        super().__init__(
            min_epochs=min_epochs,
            reduction_factor=reduction_factor,
            brackets=len(self.ladder) + 1,
            max_epochs=max_epochs,
            maximize=maximize,
            metric=metric,
        )
        self.costs = bracket_costs(self.ladder, reduction_factor, max_epochs)
        self.finisher_costs = finisher_costs(self.costs, reduction_factor)
        self.outcomes: dict[int, Outcome] = {}
        self.passed: list[int] = []
        self.bracket_of: dict[int, int] = {}
        self.deficit = Deficit(len(self.brackets), first=first_unpaused(reduction_factor, n_trials))
        self.evidence = _Evidence([[] for _ in self.ladder])
        self.rungs: list[RungEstimate] = []
        self.best = 0
        self.weights = bracket_weights(0, self.costs)
        self.legacy = False  # a study begun with one bracket goes on with one
        self._news: list[Adaptation] = []

    # ------------------------------------------------------------------ brackets

    def _bracket(self, number: int) -> _Bracket:
        return self.brackets[self.bracket_of.get(number, 0)]

    def stop_at(self, number: int) -> int | None:
        if number not in self.bracket_of:
            self.bracket_of[number] = 0 if self.legacy else self.deficit.pick(self.weights)
        return super().stop_at(number)

    def trial_attrs(self, number: int) -> dict[str, Any]:
        return {} if self.legacy else {BRACKET: self.bracket_of.get(number, 0)}

    def first_epoch(self, bracket: int) -> int:
        """Where a trial of ``bracket`` pauses first (the last epoch: it does not pause)."""
        return self.ladder[bracket] if bracket < len(self.ladder) else self.max_epochs

    # ------------------------------------------------------------------ evidence

    def observe(self, number: int, reported: Callable[[], Mapping[int, float]]) -> None:
        """An unpaused trial that reached the last epoch adds a pair to every rung; a trial of
        any bracket that reached it adds its value there (the check of the estimate)."""
        if self.legacy or number in self.evidence.finals:
            return
        if self.bracket_of.get(number) != len(self.ladder):
            self._finished(number, reported)
            return
        values = reported()
        if self.max_epochs not in values or any(e not in values for e in self.ladder):
            return
        self.evidence.seen.add(number)
        last = float(values[self.max_epochs])
        self.evidence.finals[number] = last
        for k, epoch in enumerate(self.ladder):
            self.evidence.pairs[k].append((float(values[epoch]), last))
        if self.evidence.due():
            self._estimate(resumed=False)

    def _finished(self, number: int, reported: Callable[[], Mapping[int, float]]) -> None:
        """A paused bracket's trial that was promoted from its last rung and ended: its last
        epoch's value, if it reached it."""
        bracket = self._bracket(number)
        if not bracket.rungs or number not in bracket.promoted[-1] or number in self.waiting:
            return
        value = reported().get(self.max_epochs)
        if value is not None:
            self.evidence.finals[number] = float(value)

    def _estimate(self, *, resumed: bool) -> None:
        """Measure every rung again and spread new trials by the brackets' yields."""
        evidence = self.evidence
        evidence.estimated_at = len(evidence.seen)
        self.rungs = [
            estimate_rung(epoch, pairs, self.eta, self.maximize)
            for epoch, pairs in zip(self.ladder, evidence.pairs, strict=True)
        ]
        yields = bracket_yields([r.survival for r in self.rungs], self.costs)
        finals = [(self.bracket_of.get(n, 0), v) for n, v in evidence.finals.items()]
        self.outcomes = outcomes(finals, self.eta, self.maximize)
        self.passed = passed_over(self.outcomes, self.finisher_costs, self.eta)
        # Once a bracket is passed over, the model is refuted at the study's scale: only the
        # brackets measured at the last epoch (the unpaused one among them) are trusted.
        trusted = [b for b in self.outcomes if b not in self.passed] if self.passed else None
        best = max(trusted or range(len(yields)), key=lambda b: (yields[b], -b))
        was, self.best = self.best, best
        self.weights = bracket_weights(best, self.costs)
        changed = best != was
        self._news.append(Adaptation(self._line(was, yields, resumed), self.estimate(), changed))

    def _line(self, was: int, yields: Sequence[float], resumed: bool) -> str:
        n = len(self.evidence.seen)
        rungs = "; ".join(
            f"epoch {r.epoch}: {r.hits} of the top {r.top} were in its top 1/{self.eta} "
            f"(survival {r.survival:.2f}, 90 % {r.interval()[0]:.2f}-{r.interval()[1]:.2f}"
            + (
                f", rho {r.rho:.2f} [{r.rho_low:.2f}, {r.rho_high:.2f}]"
                if r.rho is not None
                else ""
            )
            + ")"
            for r in self.rungs
        )
        start = self.first_epoch(self.best)
        where = f"epoch {start}" if self.best < len(self.ladder) else "no pause (random search)"
        if resumed:
            what = f"resumed: new trials start at {where}"
        elif self.best == was:
            what = f"unchanged: new trials start at {where}"
        else:
            what = f"new trials now start at {where} (was epoch {self.first_epoch(was)})"
        return (
            f"asha brackets auto: from {n} trials trained to epoch {self.max_epochs} without "
            f"pausing: {rungs or 'no rung'}; {self._checked()}; {what}; bracket {self.best} of "
            f"{len(self.brackets) - 1}, yield per epoch " + ", ".join(f"{y:.3g}" for y in yields)
        )

    def _checked(self) -> str:
        """What each bracket brought to the last epoch, and the brackets passed over."""
        total = sum(o.finished for o in self.outcomes.values())
        each = ", ".join(f"bracket {b} {o.top} of {o.finished}" for b, o in self.outcomes.items())
        line = f"in the top 1/{self.eta**2} of the {total} trials at epoch {self.max_epochs}: "
        line += each or "none yet"
        if self.passed:
            line += (
                " (passed over, behind the unpaused trials per epoch: bracket "
                + ", ".join(str(b) for b in self.passed)
                + ")"
            )
        return line

    def estimate(self) -> dict[str, Any]:
        """The current estimate, as the study keeps it (``hpsearch status`` shows it)."""
        return {
            "trials": len(self.evidence.seen),
            "bracket": self.best,
            "first_epoch": self.first_epoch(self.best),
            "weights": [round(w, 4) for w in self.weights],
            "finished": {str(b): [o.top, o.finished] for b, o in self.outcomes.items()},
            "passed_over": list(self.passed),
            "rungs": [
                {
                    "epoch": r.epoch,
                    "pairs": r.pairs,
                    "top": r.top,
                    "hits": r.hits,
                    "survival": round(r.survival, 4),
                    "rho": None if r.rho is None else round(r.rho, 4),
                }
                for r in self.rungs
            ],
        }

    def adaptations(self) -> list[Adaptation]:
        news, self._news = self._news, []
        return news

    # ------------------------------------------------------------------ restart

    def restore(self, trials: Sequence[FrozenTrial]) -> list[Job]:
        """The brackets from the trials' :data:`BRACKET`, the estimate from the unpaused trials
        that ended (one-bracket asha for a study begun before ``brackets: auto``)."""
        marked = [t for t in trials if BRACKET in t.user_attrs]
        self.legacy = not marked and any(TARGET in t.user_attrs for t in trials)
        for t in trials:
            self.bracket_of[t.number] = int(t.user_attrs.get(BRACKET, 0))
        # The first unpaused trials the study has had already count.
        unpaused = sum(b == len(self.ladder) for b in self.bracket_of.values())
        self.deficit.first = max(0, self.deficit.first - unpaused)
        if self.legacy:
            self.weights = [1.0] + [0.0] * (len(self.brackets) - 1)
        again = super().restore(trials)
        # The unpaused trials that ended, in the order they ended: the estimates made then.
        ended = [t for t in trials if t.state == TrialState.COMPLETE]
        ended.sort(
            key=lambda t: (t.datetime_complete.timestamp() if t.datetime_complete else 0, t.number)
        )
        for t in ended:
            self.observe(t.number, _reader(t))
        self._news.clear()
        if self.legacy:
            line = (
                "asha brackets auto: the study began with one bracket (its trials record "
                "none): it goes on with one bracket"
            )
            self._news.append(Adaptation(line, {"legacy": True, "bracket": 0}, False))
        elif self.rungs:
            yields = bracket_yields([r.survival for r in self.rungs], self.costs)
            self._news.append(
                Adaptation(self._line(self.best, yields, True), self.estimate(), False)
            )
        return again


def first_unpaused(eta: int, n_trials: int | None) -> int:
    """How many trials a study begins with unpaused: ``eta**2`` (the first estimate's top
    then holds one trial), but at most a quarter of a small study's trials.

    >>> first_unpaused(3, 10_000), first_unpaused(3, 18), first_unpaused(2, None)
    (9, 5, 4)
    """
    first = eta**2
    if n_trials is not None:
        first = min(first, max(1, math.ceil(n_trials / 4)))
    return first


def _reader(trial: FrozenTrial) -> Callable[[], Mapping[int, float]]:
    return lambda: trial.intermediate_values


def adaptation_tags(attrs: Mapping[str, Any]) -> dict[str, str]:
    """The tags of the study's MLflow run from its attributes (``brackets: auto``): the
    current estimate (``hpsearch.asha.estimate``) and each decision
    (``hpsearch.asha.decision.N``, N from 1)."""
    out: dict[str, str] = {}
    estimate = attrs.get(ESTIMATE)
    if estimate:
        out["hpsearch.asha.estimate"] = describe(estimate)
    for i, line in enumerate(attrs.get(DECISIONS) or [], start=1):
        out[f"hpsearch.asha.decision.{i}"] = str(line)[:5000]
    return out


def describe(estimate: Mapping[str, Any]) -> str:
    """One line of a kept estimate (``hpsearch status``, the study's tag).

    >>> print(describe({"trials": 9, "bracket": 1, "first_epoch": 3,
    ...           "rungs": [{"epoch": 1, "hits": 0, "top": 1, "survival": 0.29}]}))
    ... # doctest: +NORMALIZE_WHITESPACE
    new trials start at epoch 3 (bracket 1), from 9 unpaused trials;
    survival of the top: epoch 1 0.29 (0/1)
    """
    if estimate.get("legacy"):
        return "one bracket (the study began with one)"
    rungs = ", ".join(
        f"epoch {r['epoch']} {r['survival']:.2f} ({r['hits']}/{r['top']})"
        for r in estimate.get("rungs", [])
    )
    passed = estimate.get("passed_over") or []
    return (
        f"new trials start at epoch {estimate['first_epoch']} (bracket {estimate['bracket']}), "
        f"from {estimate['trials']} unpaused trials; survival of the top: {rungs or 'not yet'}"
        + (f"; passed over: bracket {', '.join(map(str, passed))}" if passed else "")
    )
