"""What the commands share: the console, user errors (exit 2), quiet logs, SIGTERM as Ctrl-C
(and a second Ctrl-C that stops at once), redacted URLs."""

from __future__ import annotations

import os
import signal
from typing import Any

import typer

#: ``--help`` of each command ends with the page of the documentation that covers it. By
#: default the page's source in the repository (``docs/howto/gpus.md``): the site is built
#: locally (``sphinx-build -W --keep-going -b html docs docs/_build/html``, where the same
#: page is ``howto/gpus.html``) and the Markdown reads as it is in a checkout. A hosted build
#: is named by this variable (``https://.../``); the pointers then end in ``.html``.
DOCS_URL_ENV = "HPSEARCH_DOCS_URL"


def _docs(page: str) -> str:
    """The line ``--help`` ends with: where the documentation covers this command."""
    base = os.environ.get(DOCS_URL_ENV)
    if base:
        return f"Docs: {base.rstrip('/')}/{page}.html"
    return f"Docs: docs/{page}.md"


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


def _unblock_interrupts() -> None:
    """Let SIGINT and SIGTERM through even when this process was started with them blocked
    (a signal mask is inherited from the parent, as an ignored SIGINT is)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _sigterm_as_interrupt() -> None:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt, also where the parent ignored SIGINT."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    _unblock_interrupts()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)


def _interrupt_then_stop() -> None:
    """Ctrl-C or SIGTERM: the first interrupts (KeyboardInterrupt: the trials in flight are
    left to resume), a second one stops the process at once."""
    seen: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if seen:
            os.write(2, b"stopped at once; the next run of this study resumes it\n")
            os._exit(130)
        seen.append(signum)
        os.write(
            2,
            b"interrupting: the trials in flight stop and will resume from their last "
            b"checkpoint on the next run (Ctrl-C again to stop at once)\n",
        )
        raise KeyboardInterrupt

    _unblock_interrupts()
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _redact(url: str) -> str:
    from hpsearch.storage import redact

    return redact(url)
