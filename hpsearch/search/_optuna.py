"""Every place where hpsearch reads Optuna's private attributes, each in one function.

Optuna has no public way to get these; each function says why it needs one. All of them were
checked on Optuna 5.0 and 5.1, and ``tests/test_optuna_internals.py`` pins that range and
checks each against Optuna's own behaviour, so an upgrade that moves one fails there first.
Nothing else in hpsearch reads a private Optuna attribute (``storage.py`` serves the gRPC
proxy's servicer, pinned by a test of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

CHECKED_ON = ("5.0", "5.1")
"""The Optuna versions (major.minor) these functions were checked on."""


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage object a study reads and writes through.

    A study built from a URL wraps its storage (an RDB storage in a cache); writes that the
    study must see again (user attributes, intermediate values of a trial) have to go
    through that same object, and ``optuna.Study`` does not expose it.
    """
    storage: BaseStorage = study._storage
    return storage


def study_id_of(study: optuna.Study) -> int:
    """The storage's id of a study (the key of ``BaseStorage.get_all_trials``).

    ``BaseStorage.get_study_id_from_name`` gives it publicly, at the cost of one storage
    round trip that the study already made.
    """
    return int(study._study_id)


def trial_id_of(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (``trial.number`` counts within a study; the storage's
    calls take the id). ``get_trial_id_from_study_id_trial_number`` gives it publicly, at the
    cost of a storage round trip per trial."""
    return int(trial._trial_id)


def cached_trial(trial: optuna.Trial) -> FrozenTrial:
    """The trial's own view of itself: the frozen trial that ``Trial.report`` and
    ``Trial.should_prune`` read and update.

    Reading ``study.trials`` instead would cost a storage round trip per report, and would
    miss a report that is still on its way to the storage.
    """
    frozen: FrozenTrial = trial._cached_frozen_trial
    return frozen


def give_relative_sample(trial: optuna.Trial, relative: Mapping[str, tuple[Any, Any]]) -> None:
    """Hand ``trial`` the relative (joint) sample its study's sampler drew in another
    process: ``name -> (distribution, value)``.

    Optuna draws a trial's relative sample lazily, at the first suggest, and caches it in
    the trial; ``Trial.relative_search_space`` is public, the cached sample behind the
    ``relative_params`` property is not. A suggest of one of these parameters then takes
    the given value, checked against its distribution as Optuna checks a sample of its own.
    """
    trial.relative_search_space = {name: dist for name, (dist, _) in relative.items()}
    trial._relative_params = {name: value for name, (_, value) in relative.items()}


def reduction_factor(pruner: Any) -> int:
    """η of a successive-halving or Hyperband pruner (no public getter)."""
    return int(pruner._reduction_factor)


def hyperband_bracket(pruner: Any, study: optuna.Study, trial: FrozenTrial) -> int:
    """The Hyperband bracket a trial was assigned to (no public getter)."""
    return int(pruner._get_bracket_id(study, trial))


def percentile(pruner: Any) -> float:
    """The percentile of a ``PercentilePruner`` (no public getter)."""
    return float(pruner._percentile)


class _SamplerView:
    """A study as a sampler sees it: its trials through ``visible`` (see :func:`sampler_view`);
    everything else is the study's own."""

    def __init__(self, study: optuna.Study, visible: Any) -> None:
        self._view_of = study
        self._visible = visible

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view_of, name)

    def _get_trials(
        self, deepcopy: bool = True, states: Any = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        trials = self._view_of._get_trials(deepcopy=False, states=states, use_cache=use_cache)
        return list(self._visible(trials, states))

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


def sampler_view(study: optuna.Study, visible: Any) -> Any:
    """``study`` as a sampler should see it: its trials filtered and added to by
    ``visible(trials, states)`` (those valid in a changed space, with the current
    distributions; an earlier study's, as prior knowledge).

    Optuna's samplers read a study's trials through the private ``Study._get_trials`` (with
    its cache), and some through ``get_trials``; there is no public hook for what they see.
    The view answers both and delegates everything else to the study.
    """
    return _SamplerView(study, visible)
