"""Data-parallel trials: warm rank processes, one per device, reused across trials.

A trial of k > 1 devices runs as k rank processes (one per device; NCCL on CUDA, gloo on
CPU) under a process group made for that trial. The rank processes are started once per
worker and device and kept: a trial then pays neither the Python + torch start-up (about
6 s here) nor loading the data again, only the process group (a fraction of a second).

Ranks never outlive their worker: each is started in its own session with a parent-death
signal (SIGKILL when the worker dies) and a watchdog that exits when it is orphaned, and the
pool kills a trial's ranks (their whole process groups) when one of them fails, so a rank
that raises ends the trial instead of leaving the others hanging in a collective.

Dask worker processes are daemonic and may not have ``multiprocessing`` children, so ranks
are plain subprocesses that connect back over a ``multiprocessing.connection`` socket on
127.0.0.1 (stdlib pickling and authentication: a hand-off of work, not an RPC layer).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener, wait
from typing import Any

from hpsearch.cluster import rank_env
from hpsearch.spec import DeviceId

log = logging.getLogger(__name__)

ENV_ADDRESS = "HPSEARCH_RANK_ADDRESS"
ENV_AUTHKEY = "HPSEARCH_RANK_AUTHKEY"
ENV_PARENT = "HPSEARCH_RANK_PARENT"
#: "1" for a process started as rank 0 of its set: it alone imports MLflow before its hello.
ENV_TRACKS = "HPSEARCH_RANK_TRACKS"

#: Seconds the other ranks get to finish once rank 0 has its result (they are then killed).
GRACE_S = 10.0
#: Seconds rank 0 gets to report once another rank failed: when rank 0 raised first, the
#: others fail only because it left their collective, and its own error is the reason.
FAILURE_GRACE_S = 3.0
START_TIMEOUT_S = 120.0


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux); no-op elsewhere.

    A rank process calls it first thing, not the worker between fork and exec
    (``preexec_fn``): a ``preexec_fn`` makes Python fork instead of vfork, which runs
    gRPC's fork handlers in the child, and with the worker's gRPC channel to the study
    active those can abort the child before it execs (grpc/grpc#43055, grpcio 1.80 on)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class RankFailure:
    rank: int
    reason: str


class _RankProcess:
    def __init__(
        self, popen: subprocess.Popen[bytes], conn: Connection, key: tuple[str, DeviceId, int]
    ) -> None:
        self.popen = popen
        self.conn = conn
        self.key = key

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.popen.wait(5)
        with contextlib.suppress(Exception):
            self.conn.close()


class RankPool:
    """The warm rank processes of one worker process, by (device kind, device id, threads)."""

    def __init__(self) -> None:
        self._authkey = secrets.token_bytes(16)
        self._listener = Listener(("127.0.0.1", 0), authkey=self._authkey)
        self._procs: dict[tuple[str, DeviceId, int], _RankProcess] = {}
        self._lock = threading.Lock()
        self._arrived: dict[int, Connection] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._accept_loop, name="hpsearch-rank-accept", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
                hello = conn.recv()
            except Exception:
                continue
            with self._cond:
                self._arrived[int(hello["pid"])] = conn
                self._cond.notify_all()

    def _spawn(
        self, kind: str, device_id: DeviceId, threads: int, *, tracks: bool
    ) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        host, port = self._listener.address
        env.update(
            {
                ENV_ADDRESS: f"{host}:{port}",
                ENV_AUTHKEY: self._authkey.hex(),
                ENV_PARENT: str(os.getpid()),
                ENV_TRACKS: "1" if tracks else "0",
                **rank_env(kind=kind, device_id=device_id, threads=threads),
            }
        )
        return subprocess.Popen(
            [sys.executable, "-m", "hpsearch.worker._rank_main"],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _hello(self, popen: subprocess.Popen[bytes], key: tuple[str, DeviceId, int]) -> Connection:
        """The connection of a started rank process, once it has imported what trials need."""
        kind, device_id, _ = key
        deadline = time.monotonic() + START_TIMEOUT_S
        with self._cond:
            while popen.pid not in self._arrived:
                if popen.poll() is not None:
                    raise RuntimeError(
                        f"rank process for {kind}:{device_id} exited with "
                        f"{popen.returncode} at start"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"rank process for {kind}:{device_id} did not start in "
                        f"{START_TIMEOUT_S:.0f} s"
                    )
                self._cond.wait(0.2)
            return self._arrived.pop(popen.pid)

    def _get(self, kind: str, device_ids: list[DeviceId], threads: int) -> list[_RankProcess]:
        """The rank processes of ``device_ids``: the warm ones kept, the others started all at
        once (each imports torch first, and rank 0 MLflow: one after the other, a set of 8
        devices would wait for 8 imports)."""
        keys = [(kind, d, threads) for d in device_ids]
        with self._lock:
            for key in keys:
                proc = self._procs.get(key)
                if proc is not None and not proc.alive():
                    proc.kill()
                    del self._procs[key]
            started: dict[tuple[str, DeviceId, int], subprocess.Popen[bytes]] = {}
            try:
                for i, key in enumerate(keys):
                    if key not in self._procs:
                        started[key] = self._spawn(*key, tracks=i == 0)
                for key, popen in started.items():
                    self._procs[key] = _RankProcess(popen, self._hello(popen, key), key)
            except BaseException:  # none of this set's new processes is left behind
                for key, popen in started.items():
                    proc = self._procs.pop(key, None)
                    if proc is not None:
                        proc.kill()
                        continue
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(popen.pid, signal.SIGKILL)
                    with contextlib.suppress(Exception):
                        popen.wait(5)
                raise
            return [self._procs[key] for key in keys]

    def _drop(self, procs: list[_RankProcess]) -> None:
        with self._lock:
            for proc in procs:
                proc.kill()
                if self._procs.get(proc.key) is proc:
                    del self._procs[proc.key]

    def pids(self) -> list[int]:
        with self._lock:
            return [p.popen.pid for p in self._procs.values() if p.alive()]

    def run(
        self,
        payload: dict[str, Any],
        *,
        kind: str,
        device_ids: list[DeviceId],
        threads: int,
        timeout: float | None = None,
    ) -> tuple[Any, RankFailure | None]:
        """Run one trial on the ranks of ``device_ids``; return rank 0's result, or the failure."""
        procs = self._get(kind, device_ids, threads)
        # The trial's rendezvous store lives here, bound before any rank is told its port:
        # a port picked free and bound later by rank 0 could be taken in between (under load,
        # by any connection on the machine), and rank 0 would abort at start.
        store = rendezvous_store()
        for rank, proc in enumerate(procs):
            proc.conn.send(
                (
                    "trial",
                    {**payload, "rank": rank, "world_size": len(procs), "master_port": store.port},
                )
            )
        pending = {proc.conn: rank for rank, proc in enumerate(procs)}
        result: Any = None
        failure: RankFailure | None = None
        deadline = None if timeout is None else time.monotonic() + timeout
        grace_end: float | None = None
        failed_at: float | None = None
        while pending:
            ready = [c for c in wait(list(pending), timeout=0.5) if isinstance(c, Connection)]
            for conn in ready:
                rank = pending.pop(conn)
                try:
                    _, value, error = conn.recv()
                except (EOFError, OSError):
                    error = f"rank {rank} died ({_exit_text(procs[rank].popen)})"
                    value = None
                if error is not None and failure is None:
                    failure = RankFailure(rank, error)
                if rank == 0:
                    result = value
                    grace_end = time.monotonic() + GRACE_S
            for conn, rank in list(pending.items()):
                if not procs[rank].alive() and conn not in ready:
                    pending.pop(conn)
                    if failure is None:
                        failure = RankFailure(
                            rank, f"rank {rank} died ({_exit_text(procs[rank].popen)})"
                        )
            now = time.monotonic()
            if failure is not None and failed_at is None:
                failed_at = now
            waiting_for_rank0 = (
                failure is not None
                and failure.rank != 0
                and any(rank == 0 for rank in pending.values())
                and procs[0].alive()
                and failed_at is not None
                and now - failed_at < FAILURE_GRACE_S
            )
            if waiting_for_rank0:
                continue
            if (
                failure is not None
                or (grace_end is not None and now > grace_end and pending)
                or (deadline is not None and now > deadline)
            ):
                if failure is None and deadline is not None and now > deadline:
                    failure = RankFailure(-1, f"timed out after {timeout:g} s")
                if pending or failure is not None:
                    self._drop(procs)  # the others may hang in a collective: end them
                break
        del store  # every rank has left the group (or was ended): the rendezvous closes
        return result, failure


def _exit_text(popen: subprocess.Popen[bytes]) -> str:
    code = popen.poll()
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def rendezvous_store() -> Any:
    """A TCP store on a port the system picks, for one trial's process group (its ranks join
    as clients; the store ends with the trial)."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=300)
    )


_pool: RankPool | None = None
_pool_lock = threading.Lock()


def rank_pool() -> RankPool:
    """This worker process's rank pool (started on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = RankPool()
        return _pool
