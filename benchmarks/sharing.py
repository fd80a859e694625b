"""Several studies on one pool: the pool's arbiter against today's race for free workers.

Three studies of the test objective ``hpsearch.testing.objectives:pooled`` (8 steps of
``--step-s`` seconds, a checkpoint after each) share a pool of ``--slots`` CPU slots, twice,
one run after the other in one command:

* **with the arbiter**: a pool started by ``hpsearch pool start``; A and B (weight 1 each)
  start together, C (weight 2, ``priority: high``, ``max_devices: slots/2``) arrives
  ``--arrival`` seconds later;
* **without it**: the same three studies on ``hpsearch pool start --no-arbiter`` (the same
  scheduler and workers, no arbiter), where they race for free workers.

Each study runs in a process of its own through the Python API, ``hpsearch.Study(spec,
run_dir=..., client=Client(ADDRESS)).run()``, with no ``cluster.address``: on the first
pool the study finds the arbiter in the scheduler and joins it (as ``hpsearch run`` of a
study file with ``cluster: {address: ...}`` does), on the second nothing installs one.

Every ``--every`` seconds one client asks the workers which trial each executes (the task
key names the study: ``hpsearch-{study}-trial-{n}-...``), the scheduler which trials wait
for a worker, and, with the arbiter, the arbiter's state (held, share, demand, preemptions).
The same sampler serves both runs. From that trace:

* **contention**: from C's first trial that waits or runs until the first study has started
  its last trial; it is cut into windows of ``--window`` seconds (only whole windows; the
  whole period as one window where it is shorter than one);
* **device-seconds share** per study in each window, against the target: C's fair share
  is what it may hold at most, ``max_devices`` = half the pool (a high-priority study is
  served first, up to its cap), and A and B split the rest 1:1, so the target is
  0.25 / 0.25 / 0.50, which is also the weights' 1:1:2;
* **Jain's fairness index** of the shares divided by their targets, per window: 1 when every
  study gets its target, 1/3 when one gets everything;
* **utilisation** while any trial waits: busy slot-seconds / slot-seconds over the samples
  where a trial waits for a slot (a task queued in Dask, or a study that wants more than it
  holds within its cap);
* **C's arrival**: seconds from C's launch until its first trial runs and until it runs on
  its fair share of slots;
* **steps trained twice**: from the notes each trial writes per step (must be 0);
* **preemptions**: trials that yielded (``hpsearch.preemptions`` in the journal) and the
  devices the arbiter asked back.

The trace goes to ``benchmarks/out/sharing-*.csv`` (and a PNG of slots per study over time
where matplotlib is installed).

    python benchmarks/sharing.py [--slots 4] [--arrival 60] [--window 60] [--step-s 1.0]
    python benchmarks/sharing.py --quick       # a smoke run, about 2.5 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine
from _sharing_report import (
    KEY,
    STUDIES,
    Plan,
    Sample,
    Side,
    metrics,
    plot,
    report,
    write_trace,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")

HPSEARCH = [sys.executable, "-m", "hpsearch.cli"]
OUT = Path(__file__).resolve().parent / "out"

#: One study's coordinator: the Python API on the pool's scheduler, nothing else.
LAUNCH = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from distributed import Client
import hpsearch
address, run_dir, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with Client(address, timeout=60) as client:
    hpsearch.Study(spec, run_dir=run_dir, client=client).run(progress=False)
"""


def spec(name: str, plan: Plan) -> dict:
    out: dict[str, Any] = {
        "name": name,
        "objective": {"model": "hpsearch.testing.objectives:pooled"},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "search": {"n_trials": plan.trials[name], "sampler": "random", "seed": 0},
        "share": {"weight": plan.weights[name]},
    }
    if name == "C":
        out["share"].update(priority="high", max_devices=plan.fair_c)
    return out


# ------------------------------------------------------------------------------ processes


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*HPSEARCH, *args], capture_output=True, text=True, timeout=180)
    if check and done.returncode != 0:
        raise RuntimeError(f"hpsearch {' '.join(args)}: {done.stderr.strip()}")
    return done


def start_pool(folder: Path, slots: int, arbiter: bool) -> str:
    args = ["pool", "start", "--gpus", "none", "--slots", str(slots), "--port", "0"]
    args += ["--lease-ttl", "3", "--dir", str(folder)]
    _cli(*args, *([] if arbiter else ["--no-arbiter"]))
    return str(json.loads((folder / "pool.json").read_text())["address"])


def stop_pool(folder: Path) -> None:
    """``hpsearch pool stop``; its process group killed where that fails."""
    try:
        pid = int(json.loads((folder / "pool.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return
    try:
        with contextlib.suppress(Exception):
            _cli("pool", "stop", "--dir", str(folder), check=False)
    finally:  # even when interrupted: the pool runs in a session of its own, workers included
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def launch(name: str, plan: Plan, address: str, run_dir: Path) -> subprocess.Popen[bytes]:
    folder = run_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step_s").write_text(str(plan.step_s))
    command = [sys.executable, "-c", LAUNCH, address, str(run_dir), json.dumps(spec(name, plan))]
    with open(run_dir / f"{name}.log", "wb") as log:  # the child keeps its own copy
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )


def end(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + 15
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -------------------------------------------------------------------------------- sampler


def _executing(dask_worker: Any) -> list[str]:
    state = dask_worker.state
    return [str(ts.key) for ts in state.executing | state.long_running]


def _waiting(dask_scheduler: Any) -> list[str]:
    """The trials the scheduler holds that are not done (processing includes those queued
    on a worker behind the one it runs)."""
    return [
        str(key)
        for key, ts in dask_scheduler.tasks.items()
        if str(key).startswith("hpsearch-") and ts.state in ("processing", "queued", "no-worker")
    ]


def sample(client: Any, arbiter: bool, t0: float) -> Sample:
    from hpsearch.cluster.pool._lease import pool_status

    running: dict[str, list[int]] = {name: [] for name in STUDIES}
    queued = dict.fromkeys(STUDIES, 0)
    executing: set[str] = set()
    for keys in client.run(_executing).values():
        for key in keys:
            match = KEY.match(key)
            if match and match["study"] in running:
                running[match["study"]].append(int(match["number"]))
                executing.add(key)
    for key in client.run_on_scheduler(_waiting):
        match = KEY.match(key)
        if match and match["study"] in queued and key not in executing:
            queued[match["study"]] += 1
    state = {}
    if arbiter:
        state = {s["name"]: s for s in pool_status(client)["studies"]}
    return Sample(time.time() - t0, running, queued, state)


# ------------------------------------------------------------------------------------ run


def run_side(side: Side, plan: Plan, folder: Path, every: float) -> None:
    from distributed import Client

    pool_dir = folder / f"pool-{side.name}"
    pool_dir.mkdir(parents=True)
    side.run_dir = folder / f"runs-{side.name}"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    stop = threading.Event()
    client = None
    try:
        address = start_pool(pool_dir, plan.slots, side.arbiter)
        client = Client(address, timeout=30)

        def loop() -> None:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    side.samples.append(sample(client, side.arbiter, t0))
                except Exception as exc:  # a late sample as the pool stops
                    if not stop.is_set():
                        print(f"  sample failed: {exc}", flush=True)
                stop.wait(max(0.0, every - (time.monotonic() - began)))

        t0 = time.time()
        for name in ("A", "B"):
            processes[name] = launch(name, plan, address, side.run_dir)
            side.launched[name] = 0.0
        sampler = threading.Thread(target=loop, daemon=True)
        sampler.start()
        while processes:
            now = time.time() - t0
            if "C" not in side.launched and now >= plan.arrival:
                processes["C"] = launch("C", plan, address, side.run_dir)
                side.launched["C"] = now
            for name, process in list(processes.items()):
                if process.poll() is not None:
                    side.ended[name] = now
                    side.codes[name] = process.returncode
                    del processes[name]
            if not processes and "C" not in side.launched:
                break
            time.sleep(0.2)
        stop.set()
        sampler.join(timeout=10)
        for s in side.samples:
            for name, state in s.arbiter.items():
                side.asked_back[name] = max(side.asked_back.get(name, 0), state["preemptions"])
    finally:
        stop.set()
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=10)
        try:
            end(processes)
        finally:
            stop_pool(pool_dir)


# -------------------------------------------------------------------------------- metrics


def plan_of(args: argparse.Namespace) -> Plan:
    fair_c = max(1, args.slots // 2)
    trial_s = 8 * args.step_s + 1.0  # eight steps and about a second of a trial's own cost
    if args.trials:
        a, b, c = (int(x) for x in args.trials.split(","))
    else:
        # A and B want devices until C has had about two windows at its share: they hold
        # half the pool each before C, the rest of the pool split in two after it.
        span = 2 * args.window + 10  # C's start-up, about 10 s
        a = b = math.ceil(
            (args.slots / 2 * args.arrival + (args.slots - fair_c) / 2 * span) / trial_s
        )
        c = math.ceil(fair_c * (2 * args.window + trial_s) / trial_s)
    return Plan(
        slots=args.slots,
        arrival=args.arrival,
        window=args.window,
        step_s=args.step_s,
        trials={"A": a, "B": b, "C": c},
        weights={"A": 1.0, "B": 1.0, "C": 2.0},
        fair_c=fair_c,
    )


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up as Ctrl-C does


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--arrival", type=float, default=60.0, help="s after A and B start")
    parser.add_argument("--window", type=float, default=60.0, help="s of each share window")
    parser.add_argument("--step-s", type=float, default=1.0, help="s of each of the 8 steps")
    parser.add_argument("--trials", default="", help="A,B,C trials (default: from the times)")
    parser.add_argument("--every", type=float, default=0.5, help="s between two samples")
    parser.add_argument("--only", choices=("with", "without"), default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: short everything")
    parser.add_argument("--keep", action="store_true", help="keep the runs' folders")
    args = parser.parse_args()
    if args.quick:
        args.arrival, args.window, args.step_s = 8.0, 10.0, 0.25
    plan = plan_of(args)
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in background
    print(
        f"{machine()}; {plan.slots} slots, trials A/B/C {plan.trials['A']}/{plan.trials['B']}/"
        f"{plan.trials['C']} of 8 steps x {plan.step_s:g} s, C arrives at {plan.arrival:g} s "
        f"(priority high, max_devices {plan.fair_c}), windows of {plan.window:g} s",
        flush=True,
    )
    sides = [Side("with the arbiter", arbiter=True), Side("without (today)", arbiter=False)]
    if args.only:
        sides = [s for s in sides if s.arbiter == (args.only == "with")]
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-sharing-"))
    for side in sides:
        print(f"{side.name}: running ...", flush=True)
        run_side(side, plan, folder, args.every)
        bad = {n: c for n, c in side.codes.items() if c != 0}
        if bad:
            print(f"  studies that failed: {bad} (logs in {side.run_dir})", flush=True)
            args.keep = True
    results = [metrics(side, plan, args.every) for side in sides]
    print()
    print(report(plan, sides, results))
    OUT.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    trace = OUT / f"sharing-{stamp}.csv"
    write_trace(trace, sides)
    print(f"\ntrace: {trace}")
    png = OUT / f"sharing-{stamp}.png"
    if plot(png, plan, sides):
        print(f"plot: {png}")
    if args.keep:
        print(f"runs kept in {folder}")
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
