"""Per-trial checkpoints: written atomically, verified on load, never trusted blindly.

A checkpoint is a torch file written to a temporary name and renamed into place, with a
SHA-256 of its bytes in a sidecar written the same way. On load, a file whose digest does
not match (truncated, half-written, corrupted) is ignored and the previous good checkpoint
is used, or none.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hpsearch._threads import ordered_executor

log = logging.getLogger(__name__)


def _writer() -> ThreadPoolExecutor:
    """One writer thread per process: checkpoints land in the order they were taken."""
    return ordered_executor("hpsearch-checkpoint")


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointStore:
    """Checkpoints of one trial: ``DIR/trial-N.pt`` (latest) and ``trial-N.prev.pt`` (the one
    before).

    :meth:`save` serialises the state at once (so training may go on changing the weights)
    and writes it from a background thread, off the training loop; :meth:`wait` (called at
    the end of a trial, and by :meth:`load` and :meth:`delete`) waits for the writes. A
    process killed before a write lands loses that epoch's checkpoint only: the trial
    resumes from the one before, and skips the reports it already made.
    """

    def __init__(self, directory: str | os.PathLike[str], trial_number: int) -> None:
        self.directory = Path(directory)
        self.latest = self.directory / f"trial-{trial_number}.pt"
        self.previous = self.directory / f"trial-{trial_number}.prev.pt"
        self._pending: list[Future[None]] = []

    @staticmethod
    def _digest_path(path: Path) -> Path:
        return path.with_name(path.name + ".sha256")

    def save(self, state: dict[str, Any], *, background: bool = True) -> None:
        import torch

        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getvalue()
        if background:
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(_writer().submit(self._write, data))
        else:
            self.wait()  # the writes in flight land first (they share a temporary name)
            self._write(data)

    def wait(self) -> None:
        """Wait for the checkpoints being written; raise if one could not be written."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def _write(self, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.latest.exists():
            os.replace(self.latest, self.previous)
            digest = self._digest_path(self.latest)
            if digest.exists():
                os.replace(digest, self._digest_path(self.previous))
        _atomic_write(self.latest, data)
        _atomic_write(self._digest_path(self.latest), hashlib.sha256(data).hexdigest().encode())

    def _load_one(self, path: Path) -> dict[str, Any] | None:
        import torch

        try:
            data = path.read_bytes()
            expected = self._digest_path(path).read_text().strip()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != expected:
            log.warning("ignoring corrupt checkpoint %s (digest mismatch)", path)
            return None
        try:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
        except (
            Exception
        ) as exc:  # a digest collision is unlikely; a torch format error is not fatal
            log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
            return None

    def load(self) -> dict[str, Any] | None:
        """The newest checkpoint that verifies, or ``None``."""
        self.wait()
        for path in (self.latest, self.previous):
            state = self._load_one(path)
            if state is not None:
                return state
        return None

    def delete(self) -> None:
        self.wait()
        for path in (self.latest, self.previous):
            for p in (path, self._digest_path(path)):
                p.unlink(missing_ok=True)
