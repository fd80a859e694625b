"""The Optuna sampler a study spec asks for.

Example:
    >>> from hpsearch.spec import StudySpec
    >>> spec = StudySpec.from_dict({
    ...     "name": "demo",
    ...     "objective": {"model": "cnn"},
    ...     "space": {"x": {"type": "int", "low": 1, "high": 4}},
    ...     "search": {"sampler": "random", "seed": 7},
    ... })
    >>> type(build_sampler(spec)).__name__
    'RandomSampler'
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hpsearch.search._space import grid_search_space
from hpsearch.spec import SAMPLER_CLASSES

if TYPE_CHECKING:
    import optuna
    from optuna.samplers import BaseSampler

    from hpsearch.spec import StudySpec

__all__ = ["build_sampler"]


def build_sampler(spec: StudySpec, *, seed_offset: int = 0) -> BaseSampler:
    """Build the sampler named by ``spec.search.sampler``, with its options.

    Defaults hpsearch adds (options in the spec override them):

    * ``tpe``: ``multivariate=True`` (joint model of the parameters) and ``constant_liar=True``
      (with many trials in flight, running trials count as bad results so that concurrent
      asks do not all suggest the same point).
    * ``grid``: the grid from :func:`~hpsearch.search._space.grid_search_space`.

    Every sampler gets ``seed=spec.search.seed`` (``+ seed_offset`` when the seed is not None).

    Args:
        spec: The validated study spec.
        seed_offset: Added to the seed, so that, e.g., a resumed coordinator does not repeat the
            random stream of the first one.

    Returns:
        A new sampler.
    """
    import optuna

    seed = spec.search.seed
    if seed is not None:
        seed += seed_offset
    name = spec.search.sampler.name
    defaults: dict[str, Any] = {"seed": seed}
    if name == "tpe":
        defaults.update(multivariate=True, constant_liar=True)
    elif name == "grid":
        defaults["search_space"] = grid_search_space(spec.space)
    sampler_class = getattr(optuna.samplers, SAMPLER_CLASSES[name])
    sampler: BaseSampler = sampler_class(**{**defaults, **spec.search.sampler.options})
    return sampler


log = logging.getLogger(__name__)


def relative_sample(trial: optuna.Trial) -> dict[str, tuple[Any, Any]] | None:
    """What the sampler draws for ``trial`` jointly, beyond the parameters asked for.

    Optuna draws a trial's relative (joint) sample at its first suggest, in the process
    that holds the trial. Drawn here, once, by the study's one sampler: a worker would
    otherwise read the whole history through the proxy to draw it again, with a sampler
    of its own. (Asked with the declared space, the sample is drawn already.) A sampler
    that fails to draw it fails here only this shortcut: the worker draws it, and a
    failure there fails that trial alone, as it always did."""
    try:
        drawn = trial.relative_params
    except Exception as exc:
        log.debug("trial %d: the joint sample is left to its worker: %s", trial.number, exc)
        return None
    space = trial.relative_search_space or {}
    out = {
        name: (space[name], value)
        for name, value in drawn.items()
        if name in space and name not in trial.params
    }
    return out or None
