"""Named fault points in a trial's life, for tests that interrupt a trial at each of them.

A trial calls :func:`fault_point` at the moments where an interruption leaves a different
state behind (the table of docs/howto/when-things-go-wrong.md):

==================== ===================================================================
``before_report``    before the report of a step (step 1: before the first report)
``after_report``     after a step's report, before its checkpoint (the last step: after
                     the last epoch's report)
``after_checkpoint`` after a step's checkpoint is on disk
``after_return``     the objective returned, its outcome is in the study; the
                     coordinator has not told Optuna yet
``in_pause``         a scheduler's pause: its checkpoint is written, the worker has not
                     said so yet
``in_resume_load``   a resumed trial, right after it read its checkpoint
==================== ===================================================================

Nothing fires unless a test asks for it, and asking costs nothing when no one does: either
a hook in this process (:func:`injected`; it may raise to stand for a kill), or, for real
processes, the environment variable ``HPSEARCH_FAULT=POINT:TRIAL:STEP:ACTION`` read once at
import (``TRIAL`` and ``STEP`` may be ``*``; ``ACTION`` is ``kill``, a SIGKILL of the
process, or ``hold``, which waits there until the run asks its trials to stop or this one to
yield, having created the file ``$HPSEARCH_FAULT_HELD`` if that is set).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

POINTS = (
    "before_report",
    "after_report",
    "after_checkpoint",
    "after_return",
    "in_pause",
    "in_resume_load",
)

#: A test's hook: ``hook(point, trial_number, step)``, called at every point.
Hook = Callable[[str, int, int], None]

_hook: Hook | None = None


def _parse(text: str) -> tuple[str, str, str, str] | None:
    parts = text.split(":")
    if len(parts) != 4 or parts[0] not in POINTS or parts[3] not in ("kill", "hold"):
        if text:
            raise ValueError(
                f"HPSEARCH_FAULT must be POINT:TRIAL:STEP:kill|hold with POINT one of "
                f"{', '.join(POINTS)}; got {text!r}"
            )
        return None
    return parts[0], parts[1], parts[2], parts[3]


_env = _parse(os.environ.get("HPSEARCH_FAULT", ""))


def active() -> bool:
    """Whether a test asked for faults (a hook here, or ``HPSEARCH_FAULT``)."""
    return _hook is not None or _env is not None


def fault_point(
    point: str, trial_number: int, step: int = 0, *, study_dir: str | None = None
) -> None:
    """The trial is at ``point`` (after ``step``): fire what a test asked for there, if any."""
    if _hook is None and _env is None:
        return
    if _hook is not None:
        _hook(point, trial_number, step)
    if _env is None:
        return
    name, trial, at, action = _env
    if name != point or trial not in ("*", str(trial_number)) or at not in ("*", str(step)):
        return
    if action == "kill":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    held = os.environ.get("HPSEARCH_FAULT_HELD")
    if held:
        Path(held).touch()
    _hold(study_dir, trial_number)


def _hold(study_dir: str | None, trial_number: int, limit_s: float = 300.0) -> None:
    """Wait here until the run asks its trials to stop, or this one to yield (or ``limit_s``
    passes)."""
    import time

    from hpsearch.trial._stop import stop_requested

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if study_dir is not None and stop_requested(study_dir, trial_number):
            return
        time.sleep(0.05)


@contextlib.contextmanager
def injected(hook: Hook) -> Iterator[None]:
    """Call ``hook(point, trial_number, step)`` at every fault point in this process."""
    global _hook
    before, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = before
