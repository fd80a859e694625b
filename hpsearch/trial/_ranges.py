"""A study file's range against the objective's own: the file's space wins (the trial holds
its range before the objective runs), hpsearch says so once per parameter in each worker
process, and Optuna's warning about the two ranges is kept from the terminal."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

log = logging.getLogger("hpsearch.trial._tracked")


@contextlib.contextmanager
def file_space_wins(
    study: str,
    study_dir: str | None,
    name: str,
    given: BaseDistribution | None,
    asked: BaseDistribution,
) -> Iterator[None]:
    """Around the suggest of ``name`` with the objective's range ``asked``: where the trial
    was given another range for it (the study file's, ``given``), say so once and keep
    Optuna's warning about the two ranges from the terminal. Nothing else is filtered."""
    if given is None or given == asked:
        yield
        return
    _say_file_space_wins(study, study_dir, name, given, asked)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=re.escape(_INCONSISTENT.format(name=name)),
            category=RuntimeWarning,
        )
        yield


#: The start of the warning Optuna gives when a trial's parameter is suggested with another
#: range than the one it holds (``optuna.Trial._check_distribution``).
_INCONSISTENT = 'Inconsistent parameter values for distribution with name "{name}"'
_said: set[tuple[str, str, str, str, str]] = set()
_said_lock = threading.Lock()


def _say_file_space_wins(
    study: str, study_dir: str | None, name: str, given: BaseDistribution, asked: BaseDistribution
) -> None:
    """Log, once per worker process for each study folder, parameter and pair of ranges,
    that the study file's range ``given`` is searched rather than the objective's ``asked``."""
    key = (study, study_dir or "", name, repr(given), repr(asked))
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    from optuna.distributions import IntDistribution

    kind = "suggest_int" if isinstance(asked, IntDistribution) else "suggest_float"
    log.warning(
        "study %r, parameter %r: the study file's range %s is searched, not the objective's "
        "%s range %s (the file's space wins)",
        study,
        name,
        describe_range(given),
        kind,
        describe_range(asked),
    )


def describe_range(distribution: BaseDistribution) -> str:
    """A range as a person writes it: ``[-5, 5]``, ``[1e-05, 0.1] (log)``, ``[0, 1] step 0.1``.

    >>> from optuna.distributions import FloatDistribution
    >>> describe_range(FloatDistribution(-5, 5))
    '[-5, 5]'
    >>> describe_range(FloatDistribution(1e-5, 0.1, log=True))
    '[1e-05, 0.1] (log)'
    """
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return repr(list(distribution.choices))
    low, high = getattr(distribution, "low", 0), getattr(distribution, "high", 0)
    text = f"[{_number(low)}, {_number(high)}]"
    step = getattr(distribution, "step", None)
    if step is not None and not (isinstance(distribution, IntDistribution) and step == 1):
        text += f" step {_number(step)}"
    if getattr(distribution, "log", False):
        text += " (log)"
    return text


def _number(value: float) -> str:
    """``value`` as short as it reads back exactly (``-5`` for ``-5.0``)."""
    short = f"{value:g}"
    return short if float(short) == float(value) else repr(value)
