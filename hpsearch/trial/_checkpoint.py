"""Per-trial checkpoints: written atomically, verified on load, never trusted blindly.

A checkpoint is a torch file written to a temporary name and renamed into place, with a
SHA-256 of its bytes in a sidecar written the same way. On load, a file whose digest does
not match (truncated, half-written, corrupted) is ignored and the previous good checkpoint
is used, or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hpsearch._process import ordered_executor

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

    def _digests(self) -> set[str]:
        """The digests of this trial's complete checkpoints. A write renames the data file and
        its digest one after the other, so a process killed between the two leaves a file
        beside the other file's digest: a file is intact when its digest is either one."""
        found = set()
        for path in (self.latest, self.previous):
            with contextlib.suppress(OSError):
                found.add(self._digest_path(path).read_text().strip())
        return found

    def _load_one(self, path: Path) -> dict[str, Any] | None:
        import torch

        try:
            data = path.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() not in self._digests():
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


# ---------------------------------------------------------------- population-based training

#: A trial's checkpoint files (a plain store's, with its digest; a sharded store's folder).
_SUFFIXES = (".pt", ".pt.sha256", ".dcp")


def _place(src: Path, dst: Path) -> None:
    """``src`` at ``dst``: a hard link (the stores replace files, never write into them), a
    copy where links are not possible, a copied tree for a folder."""
    import shutil

    if src.is_dir():
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def snapshot_path(directory: str | os.PathLike[str], trial_number: int, epoch: int) -> Path:
    """Where a paused trial's checkpoint at ``epoch`` is kept for its continuations."""
    return Path(directory) / "pbt" / f"trial-{trial_number}.epoch-{epoch}"


def snapshot(directory: str | os.PathLike[str], trial_number: int, epoch: int) -> bool:
    """Keep trial ``trial_number``'s latest checkpoint (written at the pause at ``epoch``)
    as its checkpoint at that epoch; whether it had one. The digest goes last, so a
    snapshot without one is incomplete."""
    directory = Path(directory)
    kept = snapshot_path(directory, trial_number, epoch)
    found = False
    for suffix in _SUFFIXES:
        src = directory / f"trial-{trial_number}{suffix}"
        if src.exists():
            kept.parent.mkdir(parents=True, exist_ok=True)
            _place(src, kept.with_name(kept.name + suffix))
            found = True
    return found


def continue_from(directory: str | os.PathLike[str], parent: int, epoch: int, child: int) -> bool:
    """Give trial ``child`` the checkpoint trial ``parent`` had at ``epoch``, unless the
    child already has checkpoints of its own (it ran before); whether it has one now."""
    directory = Path(directory)
    own = [directory / f"trial-{child}{s}" for s in (".pt", ".prev.pt", ".dcp", ".prev.dcp")]
    if any(p.exists() for p in own):
        return True
    kept = snapshot_path(directory, parent, epoch)
    sources = [(kept.with_name(kept.name + s), s) for s in _SUFFIXES]
    sources = [(src, s) for src, s in sources if src.exists()]
    if not sources:
        return False
    for src, suffix in sources:  # the digest after the checkpoint it vouches for
        _place(src, directory / f"trial-{child}{suffix}")
    return True
