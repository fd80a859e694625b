"""The writes a process could not make, saved to disk (``RUN_DIR/NAME/tracking-backlog``) and
written later by whoever runs the study next."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from hpsearch.exceptions import TrackingError
from hpsearch.tracking import _tags as tag
from hpsearch.tracking._trial_run import TrialRun, live
from hpsearch.tracking._writer import writer

log = logging.getLogger("hpsearch.tracking")


def spool(folder: str | os.PathLike[str], *, flush_timeout: float = 0.0) -> int:
    """Save every trial run of this process that still has writes to make to ``folder``.

    Waits ``flush_timeout`` seconds first. Returns how many runs were saved; this process
    stops writing them (:func:`replay_backlog` does, later).
    """
    writer.flush(flush_timeout)
    runs = [run for run in list(live) if run.pending()]
    if not runs:
        return 0
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        name = tag.BACKLOG_RECORD.format(number=run.trial_number, pid=os.getpid(), run_id=id(run))
        path = out / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(run.to_record()))
        os.replace(tmp, path)
        run._spooled = True  # one writer for each record: the file
        live.discard(run)
    return len(runs)


def replay_backlog(folder: str | os.PathLike[str]) -> tuple[int, int]:
    """Write the trial runs saved in ``folder``; return (written, still failing).

    Each record that is written is deleted; one that fails stays for the next time.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return 0, 0
    written = failed = 0
    for path in sorted(folder.glob("*.json")):
        try:
            run = TrialRun.from_record(json.loads(path.read_text()))
            run._drain(wait=False)
            if run.pending():
                raise TrackingError(f"{path.name}: not everything was written")
        except Exception as exc:
            log.warning("could not write the saved MLflow record %s: %s", path, exc)
            failed += 1
            continue
        path.unlink()
        written += 1
    with contextlib.suppress(OSError):
        folder.rmdir()
    return written, failed
