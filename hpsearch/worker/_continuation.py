"""The worker's side of population-based training: a continuation (a trial with the user
attributes ``parent_trial`` and ``from_epoch``) gets its parent's checkpoint at that epoch
before any of its ranks starts, then resumes from it like any resumed trial."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.tracking import tag

if TYPE_CHECKING:
    import optuna

    from hpsearch.trial import TrialTask


def lineage(task: TrialTask, study: optuna.Study) -> tuple[int, int] | None:
    """The trial and epoch whose checkpoint this trial continues, from its user attributes;
    None for any other trial (and outside a pbt study)."""
    if task.spec.search.scheduler != "pbt":
        return None
    from hpsearch.search import storage_of
    from hpsearch.search.schedulers import FROM_EPOCH, PARENT_TRIAL

    attrs = storage_of(study).get_trial(task.trial_id).user_attrs
    if attrs.get(PARENT_TRIAL) is None:
        return None
    return int(attrs[PARENT_TRIAL]), int(attrs[FROM_EPOCH])


def continue_parent(task: TrialTask, study: optuna.Study) -> str | None:
    """Copy the parent's checkpoint at its epoch into a continuation's store (unless it has
    checkpoints of its own: it ran before); why it could not, or None."""
    from hpsearch.trial import continue_from

    found = lineage(task, study)
    if found is None:
        return None
    parent, epoch = found
    if continue_from(Path(task.study_dir) / "checkpoints", parent, epoch, task.trial_number):
        return None
    return (
        f"trial {parent} left no checkpoint at epoch {epoch} to continue from (a user "
        "objective saves one with ctx.save_checkpoint after each report)"
    )


def lineage_tags(task: TrialTask, study: optuna.Study | None) -> dict[str, int]:
    """A continuation's run says which trial it continues, and from which epoch."""
    try:
        found = lineage(task, study) if study is not None else None
    except Exception:  # the study is unreachable: the run records why the trial failed
        return {}
    if found is None:
        return {}
    return {tag.PARENT_TRIAL: found[0], tag.FROM_EPOCH: found[1]}
