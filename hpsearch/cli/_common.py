"""What the commands share: the console, user errors (exit 2), quiet logs, SIGTERM as Ctrl-C,
redacted URLs."""

from __future__ import annotations

import signal
from typing import Any

import typer


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _user_error(exc: Exception) -> typer.Exit:
    err = _console(stderr=True)
    for line in str(exc).splitlines() or [type(exc).__name__]:
        err.print(f"[red]error:[/] {line}", markup=True, soft_wrap=True)
    return typer.Exit(2)


def _quiet_logs() -> None:
    import logging
    import os
    import warnings

    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    for name in ("distributed", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # A lost worker is reported by the coordinator with what happens next (the trial resumes,
    # or fails after max_retries); the scheduler's own error line would only repeat it.
    logging.getLogger("distributed.scheduler").setLevel(logging.CRITICAL)


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _redact(url: str) -> str:
    from hpsearch.storage import redact

    return redact(url)
