"""The exceptions hpsearch raises.

Every error hpsearch raises on purpose derives from :class:`HpsearchError`, so a caller (the
CLI in particular) can catch one root, print ``str(err)`` and exit with code 2. Domain errors
carry the numbers they are about as attributes (for example ``needed`` and ``found``), so a
program can act on them without parsing the message.

Example:
    >>> from hpsearch.exceptions import GpuAllocationError, HpsearchError
    >>> try:
    ...     raise GpuAllocationError("a trial needs 2 GPUs, 1 found", needed=2, found=1)
    ... except HpsearchError as err:
    ...     (str(err), err.needed, err.found)
    ('a trial needs 2 GPUs, 1 found', 2, 1)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ClusterError",
    "GpuAllocationError",
    "HpsearchError",
    "MetricNotReported",
    "MissingExtra",
    "RankFailed",
    "SpecError",
    "StorageError",
    "TrackingError",
    "TrialDiverged",
    "TrialError",
    "TrialOutOfMemory",
    "TrialTimedOut",
    "failure_reason",
]


class HpsearchError(Exception):
    """Root of every error hpsearch raises on purpose.

    Its message is one complete, user-facing explanation (rule, value and fix); the CLI prints
    it as is and exits with code 2.
    """


class SpecError(HpsearchError):
    """Raised when a study spec (file, mapping or overrides) is invalid.

    All problems found are collected before raising, one complete line each, of the form
    ``<file>: <dotted.field>: <message>``.

    Args:
        problems: The problem lines; a single string is taken as one line.

    Attributes:
        problems: The problem lines, in the order they were found.

    Example:
        >>> err = SpecError(
        ...     ["x.yaml: name: required", "x.yaml: search.n_trials: must be >= 1, got 0"]
        ... )
        >>> print(err)
        x.yaml: name: required
        x.yaml: search.n_trials: must be >= 1, got 0
    """

    def __init__(self, problems: Sequence[str] | str) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class MissingExtra(HpsearchError, ImportError):
    """Raised when a feature needs a package of one of hpsearch's optional extras.

    It is an :class:`ImportError` too, so code that guards an optional import still catches
    it; its message names the extra to install.

    Args:
        feature: What needs the package, e.g. ``"the lcbench benchmark"``.
        package: The missing package (also ImportError's ``name``).
        extra: The optional extra of hpsearch that installs it.

    Attributes:
        feature: As given.
        package: As given.
        extra: As given.

    Example:
        >>> print(MissingExtra("the lcbench benchmark", package="onnxruntime", extra="sim"))
        the lcbench benchmark needs onnxruntime: pip install 'hpsearch[sim]'
    """

    def __init__(self, feature: str, *, package: str, extra: str) -> None:
        super().__init__(f"{feature} needs {package}: pip install 'hpsearch[{extra}]'")
        self.name = package
        self.feature = feature
        self.package = package
        self.extra = extra

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Keyword-only arguments: pickle (a Dask worker's error, say) through a partial.
        return functools.partial(type(self), package=self.package, extra=self.extra), (
            self.feature,
        )


class SpecRenamed(FutureWarning):
    """Warned when a study file uses a key that was renamed: it still works, under its new
    name; the CLI prints it as one ``note:`` line."""


class _NumbersError(HpsearchError):
    """An error that carries the numbers it is about, as keyword attributes."""

    def __init__(
        self,
        message: str,
        *,
        needed: float | None = None,
        found: float | None = None,
        **numbers: float,
    ) -> None:
        super().__init__(message)
        self.needed = needed
        self.found = found
        self.numbers: dict[str, float] = {
            key: value
            for key, value in {"needed": needed, "found": found, **numbers}.items()
            if value is not None
        }
        for key, value in numbers.items():
            setattr(self, key, value)


class ClusterError(_NumbersError):
    """Raised when the Dask cluster cannot be started, joined or used.

    For example: the scheduler address does not answer, no worker joined in time, or no worker
    offers the resources a trial asks for (a task Dask would leave pending forever).

    Args:
        message: The full explanation.
        needed: What was required (e.g. workers or resource units), if a number applies.
        found: What was available, if a number applies.
        **numbers: Further numbers, each stored as an attribute of the same name.

    Attributes:
        needed: As given, or None.
        found: As given, or None.
        numbers: Every number given (``needed``/``found`` included when not None).
    """


class GpuAllocationError(ClusterError):
    """Raised when GPUs cannot be split into the GPU sets the study asks for.

    For example: ``objective.gpus_per_trial`` is larger than the number of GPUs found,
    ``cluster.gpus`` names a device that does not exist, or a GPU set is already taken.
    Carries ``needed`` and ``found`` like :class:`ClusterError`.
    """


class StorageError(HpsearchError):
    """Raised when an Optuna storage cannot be opened: the database does not answer, its file
    cannot be created, or its driver is not installed. The message names the URL (password
    hidden) and the reason, in one line."""


class TrackingError(HpsearchError):
    """Raised when MLflow tracking cannot be set up or written to.

    For example: the tracking URI is unreachable, the experiment is deleted, or a run cannot be
    created or ended.
    """


class TrialError(HpsearchError):
    """Raised when one trial fails for a reason that ends that trial, not the study.

    For example: the model does not report the study's metric, a rank process died, or the
    trial ran out of memory. The coordinator records the trial as FAIL with this message.

    Args:
        message: The full explanation.
        trial_number: The Optuna trial number, when known.

    Attributes:
        trial_number: As given, or None.
    """

    def __init__(self, message: str, *, trial_number: int | None = None) -> None:
        super().__init__(message)
        self.trial_number = trial_number


class TrialDiverged(TrialError):
    """Raised when a trial's metric or loss becomes NaN or infinite.

    The value is never reported to Optuna (a pruner must not see a NaN); the trial fails with
    this reason instead.

    Args:
        message: The full explanation, e.g. ``"train_loss is nan at step 3"``.
        step: The step (epoch) at which it diverged, when known.
        value: The non-finite value, when known.
        trial_number: The Optuna trial number, when known.

    Attributes:
        step: As given, or None.
        value: As given, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        step: int | None = None,
        value: float | None = None,
        trial_number: int | None = None,
    ) -> None:
        super().__init__(message, trial_number=trial_number)
        self.step = step
        self.value = value


class MetricNotReported(TrialError):
    """Raised when the model does not compute the study's metric at some epoch.

    Example:
        >>> failure_reason(MetricNotReported("objective.metric 'acc' is not computed"))
        "objective.metric 'acc' is not computed"
    """


class RankFailed(TrialError):
    """Raised when a rank process of a multi-device (or time-limited) trial fails or dies."""


class TrialOutOfMemory(TrialError):
    """Raised when a trial needs more memory per device than ``objective.max_memory_per_device``.

    On CPU hpsearch enforces the cap itself: after the first optimizer step it counts each
    rank's parameters, gradients and optimizer state (their local shards under fsdp) and
    raises this on every rank when one of them is over the cap. The trial fails with the
    reason ``out of memory: <message>``, as for a CUDA or host out-of-memory error.

    Args:
        message: The full explanation (what was counted, on which rank, against which cap).
        needed: The bytes the largest rank holds.
        limit: The cap in bytes.
        rank: The rank that holds the most.

    Example:
        >>> err = TrialOutOfMemory("4.0 MiB on rank 0 > 2.0 MiB", needed=4194304, limit=2097152)
        >>> failure_reason(err), err.needed > err.limit
        ('out of memory: 4.0 MiB on rank 0 > 2.0 MiB', True)
    """

    def __init__(
        self,
        message: str,
        *,
        needed: int | None = None,
        limit: int | None = None,
        rank: int | None = None,
        trial_number: int | None = None,
    ) -> None:
        super().__init__(message, trial_number=trial_number)
        self.needed = needed
        self.limit = limit
        self.rank = rank


class TrialTimedOut(TrialError):
    """Raised when a trial runs past ``objective.trial_timeout`` and its processes are killed."""


def failure_reason(exc: BaseException) -> str:
    """The one line a failed trial's reason says about ``exc``.

    hpsearch's own trial errors speak for themselves; a divergence says so; anything else is
    named by its type, without the quotes ``str(KeyError)`` adds.

    Example:
        >>> failure_reason(KeyError("lr"))
        'KeyError: lr'
        >>> failure_reason(TrialDiverged("train_loss is nan at step 3", step=3))
        'diverged: train_loss is nan at step 3'
        >>> failure_reason(ZeroDivisionError("division by zero"))
        'ZeroDivisionError: division by zero'
    """
    if isinstance(exc, TrialDiverged):
        return f"diverged: {exc}"
    if isinstance(exc, TrialOutOfMemory):
        return f"out of memory: {exc}"
    if isinstance(exc, TrialError):
        return str(exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return f"KeyError: {exc.args[0]}"
    return f"{type(exc).__name__}: {exc}"
