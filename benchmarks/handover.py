"""How long a pool takes to hand a study that joins the devices it is owed.

A pool of ``--slots`` CPU slots (``hpsearch pool start``). Study ``hold`` (weight 1) runs
alone and borrows every slot, with trials of the test objective
``hpsearch.testing.objectives:pooled`` (8 steps of ``--step-s`` seconds, a checkpoint after
each) one after the other. Once it has checkpoints (so that its trials may yield), study
``join`` (weight 3) starts: its fair share is 3 of 4 slots, so the pool asks ``hold`` for 3
devices back, ``hold``'s lowest-ranked trials yield at the end of their current step, and
``join``'s trials start on them. Then ``hold`` is stopped (Ctrl-C: its trials stop at their
next checkpoint) and ``join`` runs to its end.

One client reads the arbiter's state every ``--every`` seconds. From ``join``'s arrival in
the pool (the arbiter's own clock) it times: the pool's first ask (``hold`` yielding), each
of ``join``'s devices granted, and its whole share. ``--repeats`` rounds, each with fresh
studies on the same pool; once measured, the steps are shortened so that the round ends
quickly.

    python benchmarks/handover.py [--slots 4] [--step-s 1.0] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table

HPSEARCH = [sys.executable, "-m", "hpsearch.cli"]

#: One study's coordinator: the Python API on the pool's scheduler.
LAUNCH = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from distributed import Client
import hpsearch
address, run_dir, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with Client(address, timeout=60) as client:
    hpsearch.Study(spec, run_dir=run_dir, client=client).run(progress=False)
"""


def _cli(*args: str) -> None:
    done = subprocess.run([*HPSEARCH, *args], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"hpsearch {' '.join(args)}: {done.stderr.strip()}")


def _launch(name: str, weight: float, trials: int, step_s: float, address: str, runs: Path):
    folder = runs / name
    folder.mkdir(parents=True, exist_ok=True)
    _set_step(folder, step_s)
    spec = {
        "name": name,
        "objective": {"model": "hpsearch.testing.objectives:pooled"},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "search": {"n_trials": trials, "sampler": "random", "seed": 0},
        "share": {"weight": weight},
    }
    log = open(runs / f"{name}.log", "wb")  # noqa: SIM115 (the child keeps its own copy)
    with log:
        return subprocess.Popen(
            [sys.executable, "-c", LAUNCH, address, str(runs), json.dumps(spec)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )


def _set_step(folder: Path, seconds: float) -> None:
    """The seconds each step of the study's trials lasts from now on (see ``pooled``)."""
    (folder / "step_s.new").write_text(str(seconds))
    os.replace(folder / "step_s.new", folder / "step_s")


def _studies(client: Any) -> dict[str, dict[str, Any]]:
    from hpsearch.cluster.pool._lease import pool_status

    return {s["name"]: s for s in pool_status(client)["studies"]}


def _until(check: Any, what: str, timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(every)


def one_round(client: Any, address: str, runs: Path, args: argparse.Namespace, r: int) -> dict:
    """One hand-over: seconds from ``join``'s arrival to each event."""
    hold, join = f"hold{r}", f"join{r}"
    owed = args.slots - 1  # join's share: weight 3 of 4 on 4 slots
    procs = {hold: _launch(hold, 1.0, 1000, args.step_s, address, runs)}
    try:
        _until(
            lambda: _studies(client).get(hold, {}).get("held") == args.slots,
            f"{hold} borrows every slot",
            180,
        )
        checkpoints = runs / hold / "checkpoints"
        _until(
            lambda: len(list(checkpoints.glob("trial-*.pt"))) >= args.slots,
            f"{hold}'s first checkpoints",
            180,
        )
        time.sleep(2 * args.step_s)  # the trials' steps out of phase, as they come
        procs[join] = _launch(join, 3.0, owed, args.step_s, address, runs)
        seen: dict[str, float] = {}
        joined = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            now = time.time()
            studies = _studies(client)
            mine = studies.get(join)
            if mine is not None:
                joined = float(mine["since"])
                held = float(mine["held"])
                for k in range(1, int(held) + 1):
                    seen.setdefault(f"device {k}", now)
                if studies.get(hold, {}).get("preemptions", 0) > 0:
                    seen.setdefault("first ask", now)
                if held >= owed:
                    break
            time.sleep(args.every)
        else:
            raise TimeoutError(f"{join} gets its {owed} devices")
        assert joined is not None
        return {k: v - joined for k, v in seen.items()}
    finally:
        for name in procs:
            _set_step(runs / name, 0.05)  # the rest of the round runs quickly
        procs[hold].send_signal(signal.SIGINT)  # its trials stop at their next checkpoint
        for process in procs.values():
            try:
                process.wait(timeout=180)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=1.0, help="s of each of the 8 steps")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=float, default=0.05, help="s between two looks")
    args = parser.parse_args()
    from distributed import Client

    folder = Path(tempfile.mkdtemp(prefix="hpsearch-handover-"))
    pool_dir, runs = folder / "pool", folder / "runs"
    pool_dir.mkdir()
    _cli(
        *("pool", "start", "--gpus", "none", "--slots", str(args.slots), "--port", "0"),
        *("--metrics-port", "0", "--lease-ttl", "5", "--dir", str(pool_dir)),
    )
    print(f"{machine()}; {args.slots} slots, steps of {args.step_s:g} s", flush=True)
    rounds = []
    try:
        address = json.loads((pool_dir / "pool.json").read_text())["address"]
        with Client(address, timeout=30) as client:
            for r in range(args.repeats):
                got = one_round(client, address, runs, args, r)
                rounds.append(got)
                shown = ", ".join(
                    f"{k} {v:.2f}" for k, v in sorted(got.items(), key=lambda x: x[1])
                )
                print(f"round {r + 1}: {shown}", flush=True)
    finally:
        with contextlib.suppress(Exception):
            _cli("pool", "stop", "--dir", str(pool_dir))
    keys = ["first ask", *(f"device {k}" for k in range(1, args.slots))]
    rows = []
    for key in keys:
        values = [r[key] for r in rounds if key in r]
        if values:
            rows.append(
                [f"s from join to {key}", statistics.median(values), min(values), max(values)]
            )
    print(table(["", "median", "min", "max"], rows))


if __name__ == "__main__":
    main()
