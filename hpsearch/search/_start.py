"""What a study does before its first trial of a run, on any backend, once: compare the file
with the spec it ran under and open the warm-start sources (:func:`plan_start`, before
anything is started or written), then keep the new spec, start warm, and give the sampler
what it may learn from (:func:`start_study`; see :mod:`hpsearch.search._carry` and
:mod:`hpsearch.search._warm_start`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.search._carry import carried_sampler, changes, record_spec, refuse_breaking
from hpsearch.search._warm_start import WarmSource, WarmStart, apply, carry_for, open_sources
from hpsearch.spec import Change

if TYPE_CHECKING:
    import optuna

    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.study")


@dataclass(frozen=True)
class StartPlan:
    """What a run of a study starts from, found once before anything is started or written:
    the changes since the study last ran (none of them breaking) and the warm-start sources,
    opened and checked."""

    changes: list[Change] = field(default_factory=list)
    sources: list[WarmSource] = field(default_factory=list)

    def lines(self, spec: StudySpec) -> list[str]:
        """What is worth saying before the run: a line per change, a line per source."""
        where = str(spec.source) if spec.source else "<study>"
        return [c.line(where, spec.name) for c in self.changes] + [s.line for s in self.sources]


def existing(storage_url: str, name: str, journal: Path | None) -> optuna.Study | None:
    """The study of ``name`` if it exists, opened without writing anything (``journal``: the
    default storage's file, which is not created by looking)."""
    from hpsearch.storage import open_storage

    if journal is not None and not journal.exists():
        return None
    return existing_in(open_storage(storage_url), name)


def existing_in(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    """The study of ``name`` in ``storage``, if it holds one."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def changes_of(spec: StudySpec, study: optuna.Study | None) -> list[Change]:
    """What changed since ``study`` last ran (nothing when it has not)."""
    return [] if study is None else changes(spec, study)


def plan_start(spec: StudySpec, study: optuna.Study | None, run_dir: Path) -> StartPlan:
    """Compare ``spec`` with the one ``study`` (None: none yet) last ran under and open the
    warm-start sources (names are looked up in ``run_dir``); a breaking change or a source
    that cannot inform this study raises :class:`~hpsearch.exceptions.SpecError`."""
    found = changes_of(spec, study)
    refuse_breaking(spec, found)
    return StartPlan(found, open_sources(spec, run_dir))


def start_study(
    spec: StudySpec, storage: optuna.storages.BaseStorage, plan: StartPlan
) -> optuna.Study:
    """The study of ``spec`` in ``storage`` (created, or loaded to go on), its sampler and
    pruner the spec's, started as ``plan`` says (:func:`prepare`)."""
    import optuna

    from hpsearch.search._pruning import build_pruner
    from hpsearch.search._sampling import build_sampler
    from hpsearch.search.pareto import study_directions
    from hpsearch.tracking import tag

    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        load_if_exists=True,
        sampler=build_sampler(spec),
        pruner=build_pruner(spec),
        **study_directions(spec),
    )
    study.set_user_attr(tag.SPEC_HASH, spec.spec_hash)
    prepare(spec, study, plan)
    return study


def prepare(spec: StudySpec, study: optuna.Study, plan: StartPlan) -> int:
    """Keep the spec (a new version for a carried change), start warm, wrap the sampler, as
    ``plan`` found; the study's spec version."""
    from optuna.trial import TrialState

    version = record_spec(spec, study, plan.changes)
    warm = apply(spec, study, plan.sources) if plan.sources else WarmStart()
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
