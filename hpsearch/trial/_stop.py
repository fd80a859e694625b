"""The file in a study's run folder that asks its trials in flight to stop (a leaf module:
the trial code and the fault points look at it without importing the rest of hpsearch).
See :mod:`hpsearch.coordinator._interruption`."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

#: The file in a study's run folder that asks its trials in flight to stop.
STOP_FILE = "stop-requested"
#: The folder in a study's run folder where a file ``N`` asks trial N alone to yield its
#: devices (a shared pool's preemption): it holds the reason.
YIELD_DIR = "yield"


class TrialStopped(BaseException):
    """The run asked its trials to stop (Ctrl-C, SIGTERM), or this trial to yield its devices:
    the trial stops at this safe point, its checkpoint written, and is not ended (it resumes
    later).

    A ``BaseException``, like ``KeyboardInterrupt``, so that an objective's own
    ``except Exception`` does not swallow it."""

    def __init__(self, step: int | None) -> None:
        super().__init__(f"stopped after step {step}")
        self.step = step


def yield_file(study_dir: str | os.PathLike[str], number: int) -> str:
    return os.path.join(study_dir, YIELD_DIR, str(number))


def stop_requested(study_dir: str | os.PathLike[str] | None, number: int | None = None) -> bool:
    """Whether the run asked its trials to stop, or trial ``number`` to yield (a ``stat`` or
    two: cheap enough for each step)."""
    if study_dir is None:
        return False
    if os.path.exists(os.path.join(study_dir, STOP_FILE)):
        return True
    return number is not None and os.path.exists(yield_file(study_dir, number))


def yield_requested(study_dir: str | os.PathLike[str] | None, number: int) -> bool:
    """Whether trial ``number`` alone was asked to yield its devices."""
    return study_dir is not None and os.path.exists(yield_file(study_dir, number))


def request_yield(study_dir: str | os.PathLike[str], number: int, reason: str) -> None:
    """Ask trial ``number`` to stop at its next safe point, for ``reason``."""
    path = yield_file(study_dir, number)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(reason)
    os.replace(tmp, path)


def take_yield(study_dir: str | os.PathLike[str] | None, number: int) -> str | None:
    """The reason trial ``number`` was asked to yield, or ``None``; the request is removed
    (the trial's next attempt runs on)."""
    if study_dir is None:
        return None
    path = yield_file(study_dir, number)
    try:
        with open(path, encoding="utf-8") as file:
            reason = file.read().strip() or "asked to yield its devices"
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.remove(path)
    return reason


#: The trials this process runs now, by thread: (study folder, trial number).
_RUNNING: dict[int, tuple[str, int]] = {}
#: Why this process's worker is going away (its batch job ends), once it is.
_ENDING: list[str] = []


@contextlib.contextmanager
def running(study_dir: str | os.PathLike[str], number: int) -> Iterator[None]:
    """Note that this thread runs trial ``number`` of the study in ``study_dir`` (so that
    :func:`yield_running` can reach it)."""
    key = threading.get_ident()
    _RUNNING[key] = (os.fspath(study_dir), number)
    if _ENDING:  # a trial placed here after the warning: it yields at its first safe point
        with contextlib.suppress(OSError):
            request_yield(study_dir, number, _ENDING[0])
    try:
        yield
    finally:
        _RUNNING.pop(key, None)


def ending() -> bool:
    """Whether this process's worker is going away (see :func:`job_ending`)."""
    return bool(_ENDING)


def job_ending(reason: str) -> int:
    """This worker's batch job ends soon: every trial it runs, and any placed on it from now
    on, yields at its next safe point, and their outcomes say the worker is going away.
    Returns how many trials were running."""
    _ENDING[:] = [reason]
    return yield_running(reason)


def yield_running(reason: str) -> int:
    """Ask every trial this process runs to yield at its next safe point; return how many
    (a worker whose batch job is about to end: see :mod:`hpsearch.preload`)."""
    trials = list(_RUNNING.values())
    for study_dir, number in trials:
        with contextlib.suppress(OSError):
            request_yield(study_dir, number, reason)
    return len(trials)
