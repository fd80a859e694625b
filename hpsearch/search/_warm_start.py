"""``search.warm_start``: a study that starts from earlier ones (see :mod:`hpsearch.search._carry`).

A source is a study of the same run folder (its name), a run folder (``RUN_DIR/NAME``) or an
Optuna storage URL (its one study, or the study of this study's name in it). From each:

- ``top_k``: its best completed configurations, mapped onto this space (a value outside a
  range clipped to it, a choice this space lacks left to the sampler, a parameter it lacks
  sampled), enqueued once as this study's first trials, each with the user attribute
  ``hpsearch.transferred_from: SOURCE#NUMBER``;
- ``history``: its completed trials that are valid in this space, for the sampler alone,
  until this study has ``HISTORY_UNTIL`` (10) completed trials of its own.

A source that optimizes another metric or in another direction cannot inform this study: one
line says so, as for a breaking change.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.search._carry import (
    HISTORY_UNTIL,
    SPEC_ATTR,
    TRANSFERRED,
    WARM_ATTR,
    Carry,
    _as_current,
    _valid,
)

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from hpsearch.spec import StudySpec, WarmStartSpec


@dataclass
class WarmStart:
    """What the warm starts gave: the lines that say it, and the trials for the sampler."""

    lines: list[str] = field(default_factory=list)
    history: list[FrozenTrial] = field(default_factory=list)
    enqueued: int = 0


def _error(spec: StudySpec, message: str) -> Exception:
    from hpsearch.exceptions import SpecError

    where = str(spec.source) if spec.source else "<study>"
    return SpecError(f"{where}: search.warm_start: {message}")


def open_source(source: str, spec: StudySpec, run_dir: Path) -> tuple[optuna.Study, str]:
    """The earlier study ``source`` names, and how to call it."""
    import optuna

    from hpsearch.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if "://" in source:
        from hpsearch.exceptions import StorageError

        try:
            storage = open_storage(source)
        except StorageError as exc:
            raise _error(spec, str(exc)) from None
        names = [s.study_name for s in storage.get_all_studies()]
        name = names[0] if len(names) == 1 else spec.name
        if name not in names:
            shown = ", ".join(names) or "none"
            raise _error(spec, f"{source} holds several studies and none is {spec.name!r}: {shown}")
        return optuna.load_study(study_name=name, storage=storage), f"{name} ({source})"
    folder = Path(source).expanduser()
    if not (folder / "study.yaml").is_file():
        folder = run_dir / source
    if not (folder / "study.yaml").is_file():
        raise _error(spec, f"no study {source!r} (no {folder / 'study.yaml'}: has it run?)")
    import yaml

    raw = yaml.safe_load((folder / "study.yaml").read_text()) or {}
    url = raw.get("storage") or f"journal://{folder / 'optuna.journal'}"
    study = optuna.load_study(
        study_name=str(raw.get("name", folder.name)), storage=open_storage(url)
    )
    return study, source


@dataclass(frozen=True)
class WarmSource:
    """One warm-start source, opened and checked once for a run: its entry in the spec, how
    to call it, its completed trials with a finite value (best first) and how many completed
    trials it holds."""

    start: WarmStartSpec
    label: str
    complete: list[FrozenTrial]
    n_complete: int

    @property
    def line(self) -> str:
        """What it holds, in one line (``hpsearch run`` and ``hpsearch validate`` print it)."""
        return f"search.warm_start: from {self.label} ({self.n_complete} completed trials)"


def open_sources(spec: StudySpec, run_dir: Path) -> list[WarmSource]:
    """Open each warm-start source and check that it can inform this study, before anything
    is started or written (:class:`~hpsearch.exceptions.SpecError` in one line if not)."""
    from optuna.trial import TrialState

    maximize = spec.direction.value == "maximize"
    out = []
    for start in spec.search.warm_start:
        source, label = open_source(start.from_, spec, run_dir)
        _same_goal(spec, source, label)
        ended = source.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        complete = [t for t in ended if t.value is not None and math.isfinite(t.value)]
        complete.sort(key=lambda t: (-float(t.value or 0) if maximize else t.value, t.number))
        out.append(WarmSource(start, label, complete, len(ended)))
    return out


def check_sources(spec: StudySpec, run_dir: Path) -> list[str]:
    """Open each warm-start source and check it (see :func:`open_sources`); a line for each:
    what it holds."""
    return [source.line for source in open_sources(spec, run_dir)]


def _same_goal(spec: StudySpec, source: optuna.Study, label: str) -> None:
    """The source optimizes the same metric in the same direction, or one line says not."""
    text = source.user_attrs.get(SPEC_ATTR)
    theirs = (json.loads(text).get("objective") or {}) if isinstance(text, str) else {}
    metric = theirs.get("metric")
    ours = [d.name.lower() for d in source.directions]
    if ours != [spec.direction.value] or (metric is not None and metric != spec.metric):
        shown = f"{metric or 'its metric'} ({', '.join(ours)})"
        raise _error(
            spec,
            f"{label} optimizes {shown}, this study {spec.metric} ({spec.direction.value}): "
            "its values cannot inform this one",
        )


def mapped(params: dict[str, Any], space: dict[str, BaseDistribution]) -> tuple[dict, list]:
    """``params`` on ``space``: clipped into ranges, unknown choices and parameters dropped
    (the sampler draws them); the names of those changed.

    >>> from optuna.distributions import FloatDistribution, CategoricalDistribution
    >>> space = {"lr": FloatDistribution(1e-4, 1e-2, log=True),
    ...          "opt": CategoricalDistribution(["adam", "sgd"])}
    >>> mapped({"lr": 0.1, "opt": "rmsprop", "old": 3}, space)
    ({'lr': 0.01}, ['lr clipped', 'opt sampled'])
    """
    from optuna.distributions import CategoricalDistribution, IntDistribution

    out: dict[str, Any] = {}
    notes = []
    for name, dist in space.items():
        if name not in params:
            notes.append(f"{name} sampled")
            continue
        value = params[name]
        if isinstance(dist, CategoricalDistribution):
            if value in dist.choices:
                out[name] = value
            else:
                notes.append(f"{name} sampled")
            continue
        low, high = dist.low, dist.high  # type: ignore[attr-defined]
        clipped = min(max(value, low), high)
        if isinstance(dist, IntDistribution):
            clipped = low + round((int(clipped) - low) / dist.step) * dist.step
            clipped = min(clipped, high)
        if clipped != value:
            notes.append(f"{name} clipped")
        out[name] = clipped
    return out, notes


def apply(spec: StudySpec, study: optuna.Study, sources: Sequence[WarmSource]) -> WarmStart:
    """Enqueue each source's ``top_k`` (once in the study's life) and gather its ``history``
    (``sources``: :func:`open_sources`, opened once for the run)."""
    from hpsearch.search._space import to_distributions

    space = to_distributions(spec.space)
    done = set(json.loads(study.user_attrs.get(WARM_ATTR) or "[]"))
    out = WarmStart()
    for source in sources:
        start, label, complete = source.start, source.label, source.complete
        if start.from_ not in done and start.top_k:
            changed: dict[str, int] = {}
            for trial in complete[: start.top_k]:
                params, notes = mapped(trial.params, space)
                for note in notes:
                    changed[note] = changed.get(note, 0) + 1
                study.enqueue_trial(params, user_attrs={TRANSFERRED: f"{label}#{trial.number}"})
                out.enqueued += 1
            detail = ", ".join(f"{k} in {n}" for k, n in sorted(changed.items()))
            out.lines.append(
                f"warm start: the best {min(start.top_k, len(complete))} of {label} run first"
                + (f" ({detail})" if detail else "")
            )
            done.add(start.from_)
        if start.history:
            valid = [t for t in complete if _valid(t.params, space)]
            first = -1 - len(out.history)
            for i, trial in enumerate(valid):
                attrs = {**trial.user_attrs, TRANSFERRED: f"{label}#{trial.number}"}
                out.history.append(_as_current(trial, space, number=first - i, user_attrs=attrs))
            out.lines.append(
                f"warm start: the sampler learns from {len(valid)} of {len(complete)} completed "
                f"trials of {label} (valid in this space) until this study has "
                f"{HISTORY_UNTIL} of its own; never its best or budget"
            )
    study.set_user_attr(WARM_ATTR, json.dumps(sorted(done)))
    return out


def _listed(numbers: Sequence[int]) -> str:
    """``numbers`` as words.

    >>> _listed([1]), _listed([1, 4]), _listed([1, 4, 9])
    ('1', '1 and 4', '1, 4 and 9')
    """
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def end_notes(study: optuna.Study) -> list[str]:
    """The lines worth reading at the end of a run of ``study`` (:attr:`StudyResult.notes`)."""
    line = outcome(study)
    return [line] if line else []


def outcome(study: optuna.Study) -> str | None:
    """How the configurations a warm start enqueued did in ``study``: their ranks among its
    completed trials, in one line (None: none enqueued, or several objectives).

    The ranks say whether the earlier study was a good guide: near the top, its best were
    this study's too; all in the worse half, the earlier study's good region is not this
    one's, and its ``history`` pulled the first trials the wrong way."""
    from optuna.trial import TrialState

    if len(study.directions) != 1:
        return None
    trials = study.get_trials(deepcopy=False)
    moved = [t for t in trials if TRANSFERRED in t.user_attrs]
    if not moved:
        return None
    maximize = study.direction.name == "MAXIMIZE"
    complete = sorted(
        (
            t
            for t in trials
            if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
        ),
        key=lambda t: (-t.value if maximize else t.value, t.number),  # type: ignore[operator]
    )
    rank = {t.number: i + 1 for i, t in enumerate(complete)}
    ranks = sorted(rank[t.number] for t in moved if t.number in rank)
    others = sum(t.state.is_finished() and t.number not in rank for t in moved)
    running = len(moved) - len(ranks) - others
    if not ranks and not others:
        return None  # none has ended yet
    what = f"{len(moved)} configuration{'s' if len(moved) > 1 else ''} from earlier studies"
    aside = ", ".join(
        text
        for n, text in ((others, f"{others} pruned or failed"), (running, f"{running} running"))
        if n
    )
    if not ranks:
        return f"warm start: none of the {what} completed ({aside})"
    line = (
        f"warm start: the {what} ranked {_listed(ranks)} of the {len(complete)} completed "
        f"trials here" + (f" ({aside})" if aside else "")
    )
    if len(complete) >= 4 and ranks[0] > len(complete) / 2:
        line += ": all in the worse half, the earlier studies' best is not this study's"
    return line


def carry_for(spec: StudySpec, study: optuna.Study, history: list[FrozenTrial]) -> Carry:
    """What the study's sampler sees: its valid trials, and ``history``."""
    from hpsearch.search._space import to_distributions

    return Carry(to_distributions(spec.space), history=history)


def with_warm_start(spec: StudySpec | Mapping[str, Any], warm_start: Any) -> dict[str, Any]:
    """``spec`` in file form with ``search.warm_start`` set to ``warm_start``."""
    from hpsearch.spec import StudySpec

    data = spec.to_dict() if isinstance(spec, StudySpec) else dict(spec)
    return {**data, "search": {**dict(data.get("search") or {}), "warm_start": warm_start}}
