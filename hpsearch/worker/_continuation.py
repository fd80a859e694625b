"""The worker's side of population-based training: a continuation (a trial with the user
attributes ``parent_trial`` and ``from_epoch``, which the coordinator hands over as
:attr:`~hpsearch.trial.TrialTask.lineage`) gets its parent's checkpoint at that epoch before
any of its ranks starts, then resumes from it like any resumed trial."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch.tracking import tag

if TYPE_CHECKING:
    from hpsearch.trial import TrialTask


def continue_parent(task: TrialTask) -> str | None:
    """Copy the parent's checkpoint at its epoch into a continuation's store (unless it has
    checkpoints of its own: it ran before); why it could not, or None (also for a trial that
    continues none)."""
    from hpsearch.trial import continue_from

    if task.lineage is None:
        return None
    parent, epoch = task.lineage
    if continue_from(task.checkpoint_dir, parent, epoch, task.trial_number):
        return None
    return (
        f"trial {parent} left no checkpoint at epoch {epoch} to continue from (a user "
        "objective saves one with ctx.save_checkpoint after each report)"
    )


def lineage_tags(task: TrialTask) -> dict[str, int]:
    """A continuation's run says which trial it continues, and from which epoch."""
    if task.lineage is None:
        return {}
    return {tag.PARENT_TRIAL: task.lineage[0], tag.FROM_EPOCH: task.lineage[1]}
