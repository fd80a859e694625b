"""Studies that change: a study run again from an edited file, and a study started from
earlier ones (``search.warm_start``).

The spec a study runs under is kept in the study itself (the user attribute
``hpsearch.spec``, with its version ``hpsearch.spec_version``), so that any storage holds
its history. :func:`changes` compares it with the file run now
(:mod:`hpsearch.spec._changes`), once per run (:func:`hpsearch.search.plan_start`): a breaking
change stops the run before anything is written; a carried one makes a new version, and each
trial records the version it ran under.

The sampler sees the study through :class:`CarriedSampler`: earlier trials whose parameters
are all valid in the current space, with the current distributions (Optuna's samplers model
only trials whose distributions agree), and the completed trials of the warm-start studies
(``history``), marked transferred with their source, until the study has 10 completed
trials of its own (their values put on this study's scale by rank: see :meth:`Carry.prior`).
Those are the sampler's prior knowledge only: they are not in this study, so they are never
its best and never in its budget. A warm start's ``top_k`` best configurations, mapped onto
this space, are enqueued once, as the study's first trials.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch.spec import Change, compare

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler
    from optuna.trial import FrozenTrial

    from hpsearch.spec import StudySpec

log = logging.getLogger(__name__)

#: Study user attributes: the spec the study runs under (its ``to_dict`` as JSON), its version,
#: and the warm starts already enqueued.
SPEC_ATTR = "hpsearch.spec"
VERSION_ATTR = "hpsearch.spec_version"
WARM_ATTR = "hpsearch.warm_start"
#: Trial user attribute (and MLflow tag) of a configuration taken from an earlier study.
TRANSFERRED = "hpsearch.transferred_from"  # = tracking.tag.TRANSFERRED_FROM
#: The transferred trials inform the sampler until the study has this many completed trials
#: of its own (TPE's start-up count; see Carry.prior).
HISTORY_UNTIL = 10


def stored_spec(study: optuna.Study) -> dict[str, Any] | None:
    """The spec the study last ran under, as ``StudySpec.to_dict`` data (None: not kept)."""
    text = study.user_attrs.get(SPEC_ATTR)
    return json.loads(text) if isinstance(text, str) else None


def changes(spec: StudySpec, study: optuna.Study) -> list[Change]:
    """What changed since the study last ran (nothing for a study that kept no spec)."""
    old = stored_spec(study)
    return [] if old is None else compare(old, spec.to_dict())


def refuse_breaking(spec: StudySpec, found: Sequence[Change]) -> None:
    """Raise :class:`~hpsearch.exceptions.SpecError` (a line each) for breaking changes."""
    from hpsearch.exceptions import SpecError

    breaking = [c for c in found if c.kind == "breaking"]
    if breaking:
        where = str(spec.source) if spec.source else "<study>"
        raise SpecError([c.line(where, spec.name) for c in breaking])


def record_spec(spec: StudySpec, study: optuna.Study, found: Sequence[Change]) -> int:
    """Keep ``spec`` in the study; a new version when a change is carried. Its version."""
    version = int(study.user_attrs.get(VERSION_ATTR, 0) or 0)
    if version == 0 or any(c.kind == "carried" for c in found):
        version += 1
        study.set_user_attr(VERSION_ATTR, version)
    study.set_user_attr(SPEC_ATTR, json.dumps(spec.to_dict(), sort_keys=True))
    return version


# ------------------------------------------------------------------ what the sampler sees


def _valid(params: dict[str, Any], space: dict[str, BaseDistribution]) -> bool:
    """Whether every parameter of ``params`` that the space has is inside it."""
    from optuna.distributions import CategoricalDistribution

    for name, dist in space.items():
        if name not in params:
            continue
        value = params[name]
        if isinstance(dist, CategoricalDistribution):
            if value not in dist.choices:
                return False
        elif not dist.low <= value <= dist.high:  # type: ignore[attr-defined]
            return False
    return True


def _as_current(
    trial: FrozenTrial,
    space: dict[str, BaseDistribution],
    *,
    number: int | None = None,
    user_attrs: dict[str, Any] | None = None,
    value: float | None = None,
) -> FrozenTrial:
    """``trial`` with the current distributions of the parameters the space has (and another
    number and user attributes, for one taken from another study)."""
    from optuna.trial import FrozenTrial

    from hpsearch.search._optuna import trial_id_of

    kept = {name: trial.params[name] for name in space if name in trial.params}
    return FrozenTrial(
        number=trial.number if number is None else number,
        state=trial.state,
        value=value,
        values=None if value is not None else trial.values,
        datetime_start=trial.datetime_start,
        datetime_complete=trial.datetime_complete,
        params=kept,
        distributions={name: space[name] for name in kept},
        user_attrs=trial.user_attrs if user_attrs is None else user_attrs,
        system_attrs=trial.system_attrs,
        intermediate_values=trial.intermediate_values,
        trial_id=trial_id_of(trial) if number is None or number >= 0 else number,
    )


@dataclass
class Carry:
    """What the sampler sees of a study whose space changed or that starts warm."""

    space: dict[str, BaseDistribution]
    history: list[FrozenTrial] = field(default_factory=list)
    _seen: dict[int, tuple[Any, FrozenTrial | None]] = field(default_factory=dict)

    def visible(self, trials: Iterable[FrozenTrial], states: Any) -> list[FrozenTrial]:
        """The study's trials valid in the current space, with its distributions, after the
        transferred ones (numbered below 0, in the states asked for; see :meth:`prior`)."""
        trials = list(trials)
        out = [t for t in self.prior(trials) if states is None or t.state in states]
        for trial in trials:
            if all(trial.distributions.get(n, d) == d for n, d in self.space.items()):
                out.append(trial)  # this version's, or unchanged: as it is
                continue
            key = (trial.state, trial.datetime_complete)
            seen = self._seen.get(trial.number)
            if seen is None or seen[0] != key:
                kept = _as_current(trial, self.space) if _valid(trial.params, self.space) else None
                seen = self._seen[trial.number] = (key, kept)
            if seen[1] is not None:
                out.append(seen[1])
        return out

    def prior(self, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        """The transferred trials as the sampler sees them next to ``trials`` (the study's).

        They are prior knowledge for a study that has little of its own: once it has
        :data:`HISTORY_UNTIL` completed trials (TPE's own start-up count) the sampler learns
        from those alone. And another study's values need not be on this one's scale (another
        data set: accuracies of 95 % there, 70 % here), while a sampler ranks all it sees
        together: from 3 completed trials on, each transferred trial's value is the value at
        its rank's quantile among this study's own (its order among the transferred kept)."""
        from optuna.trial import TrialState

        own = sorted(
            float(t.value)
            for t in trials
            if t.state == TrialState.COMPLETE and t.value is not None and t.number >= 0
        )
        if not self.history or len(own) >= HISTORY_UNTIL:
            return []
        if len(own) < 3:
            return list(self.history)
        order = sorted(range(len(self.history)), key=lambda i: float(self.history[i].value or 0))
        out = list(self.history)
        for rank, i in enumerate(order):
            at = rank / max(1, len(order) - 1) * (len(own) - 1)
            low = int(at)
            high = min(low + 1, len(own) - 1)
            value = own[low] + (own[high] - own[low]) * (at - low)
            out[i] = _as_current(
                self.history[i], self.space, number=self.history[i].number, value=value
            )
        return out

    def valid_count(self, trials: Sequence[FrozenTrial]) -> int:
        return sum(1 for t in trials if _valid(t.params, self.space))


def _sampler_class() -> type:
    from optuna.samplers import BaseSampler

    class CarriedSampler(BaseSampler):
        """A sampler that sees the study through a :class:`Carry`."""

        def __init__(self, base: BaseSampler, carry: Carry) -> None:
            from hpsearch.search._optuna import sampler_view

            self.base = base
            self.carry = carry
            self._view: Callable[[Any], Any] = lambda study: sampler_view(study, carry.visible)

        def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
            return self.base.infer_relative_search_space(self._view(study), trial)

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
            return self.base.sample_relative(self._view(study), trial, search_space)

        def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
            return self.base.sample_independent(self._view(study), trial, name, dist)

        def before_trial(self, study: Any, trial: Any) -> None:
            self.base.before_trial(study, trial)

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            self.base.after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:
            self.base.reseed_rng()

    return CarriedSampler


def carried_sampler(base: BaseSampler, carry: Carry) -> BaseSampler:
    """``base``, seeing the study through ``carry``."""
    sampler: BaseSampler = _sampler_class()(base, carry)
    return sampler
