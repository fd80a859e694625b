"""Which trial of a study is the best."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna


def best_complete_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The best complete trial, or ``None`` when no trial completed (or the study has
    several objectives: its best trials are its Pareto front, ``study.best_trials``)."""
    import optuna
    from optuna.trial import TrialState

    if len(study.directions) > 1:
        return None
    done = [
        (t.value, t)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None and math.isfinite(t.value)
    ]
    if not done:
        return None
    pick = max if study.direction == optuna.study.StudyDirection.MAXIMIZE else min
    return pick(done, key=lambda pair: pair[0])[1]
