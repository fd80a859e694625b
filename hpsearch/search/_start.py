"""What a study does before its first trial of a run, on any backend: compare the file with
the spec it ran under, keep the new one, start warm, and give the sampler what it may learn
from (see :mod:`hpsearch.search._carry` and :mod:`hpsearch.search._warm_start`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.search import (
    WarmStart,
    apply,
    carried_sampler,
    carry_for,
    changes,
    check_changes,
    record_spec,
)
from hpsearch.spec import Change

if TYPE_CHECKING:
    import optuna

    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.study")


def existing(storage_url: str, name: str, journal: Path | None) -> optuna.Study | None:
    """The study of ``name`` if it exists, opened without writing anything (``journal``: the
    default storage's file, which is not created by looking)."""
    import optuna

    from hpsearch.storage import open_storage

    if journal is not None and not journal.exists():
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage_url))
    except KeyError:
        return None


def changes_of(spec: StudySpec, study: optuna.Study | None) -> list[Change]:
    """What changed since ``study`` last ran (nothing when it has not)."""
    return [] if study is None else changes(spec, study)


def prepare(spec: StudySpec, study: optuna.Study, run_dir: Path) -> int:
    """Check and keep the spec, start warm, wrap the sampler; the study's spec version."""
    from optuna.trial import TrialState

    found = check_changes(spec, study)
    version = record_spec(spec, study, found)
    warm = apply(spec, study, run_dir) if spec.search.warm_start else WarmStart()
    for line in warm.lines:
        log.warning("%s", line)
    carried = version > 1
    if carried or warm.history:
        carry = carry_for(spec, study, warm.history)
        if carried:
            ended = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            log.warning(
                "spec version %d: the sampler learns from %d of the %d earlier completed "
                "trials (those valid in the new space)",
                version,
                carry.valid_count(ended),
                len(ended),
            )
        study.sampler = carried_sampler(study.sampler, carry)
    return version
