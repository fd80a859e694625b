"""Where a trivial trial's milliseconds go, in every process of ``hpsearch run``: a profile.

Runs the study of ``benchmarks/overhead.py`` (a trivial user objective, TPE, 2 worker
processes, MLflow on) under ``py-spy record --subprocesses --gil`` twice, with SMALL and LARGE
trials, and prints the CPU samples per trial of the difference (so start-up and the final
drain cancel out, as in the overhead benchmark), grouped by process and by what the
sampled stack is doing. ``--baseline DIR`` profiles another checkout the same way, as a
second column.

    python benchmarks/trial_profile.py [--small 20] [--large 620] [--rate 250] [--baseline DIR]

Needs ``pip install py-spy`` and the right to attach to child processes (root, or
``kernel.yama.ptrace_scope=0``). Only the thread that holds a process's GIL is sampled, so
a row approximates the Python CPU time of that work (py-spy's own idle detection counts
waiting threads in a container); py-spy pauses each process to sample it, which slows the
run but not the proportions.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead
from _common import machine, table

#: (row, process, a pattern any frame of the stack matches); the first that matches wins.
GROUPS = [
    ("MLflow writes (create_run, log_batch, set_terminated)", "worker", r"mlflow[/.]"),
    ("SQLite / SQLAlchemy (the one-transaction write)", "worker", r"sqlalchemy|sqlite"),
    ("a trial's storage calls (gRPC client)", "worker", r"grpc|_grpc|storages/_grpc"),
    ("TPE and the rest of the trial", "worker", r"optuna|hpsearch[/.]training"),
    ("Dask worker (event loop, comms, state machine)", "worker", r"distributed|tornado|asyncio"),
    ("the rest", "worker", r""),
    ("gRPC storage proxy", "coordinator", r"grpc|storages/_grpc"),
    ("ask, tell, submit (TPE in the ask)", "coordinator", r"optuna|hpsearch[/.]coordinator"),
    ("Dask scheduler", "coordinator", r"distributed[/.]scheduler"),
    ("Dask client", "coordinator", r"distributed[/.]client"),
    ("Dask comms and the rest of distributed", "coordinator", r"distributed|tornado|asyncio"),
    ("MLflow (the study's run, the final read-back)", "coordinator", r"mlflow[/.]"),
    ("the rest", "coordinator", r""),
]


def _split(frames: list[str]) -> tuple[str, list[str]]:
    """A py-spy --subprocesses stack starts with one ``process PID:"cmdline"`` frame per
    process from the command down: the command's own stacks (the coordinator) have one,
    a Dask worker's (spawned by its nanny in the command's process) two."""
    procs = [f for f in frames if f.startswith("process ")]
    rest = frames[len(procs) :]
    if len(procs) == 1:
        return "coordinator", rest
    if "spawn_main" in procs[-1] and "resource_tracker" not in procs[-1]:
        return "worker", rest
    return "other", rest


def _profile(setup: str, n_trials: int, rate: int, out: Path) -> collections.Counter[str]:
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-profile-"))
    try:
        cmd, cwd = overhead._hpsearch_command(n_trials, folder, 2)
        env = overhead._env(overhead.BASELINE if setup == "baseline" else None)
        spy = shutil.which("py-spy") or "py-spy"
        raw = out / f"{setup}-{n_trials}.txt"
        record = [spy, "record", "-s", "--gil", "-r", str(rate), "-f", "raw", "-o", str(raw)]
        subprocess.run(
            [*record, "--", *cmd],
            cwd=cwd,
            env=env,
            check=True,
            capture_output=True,
        )
        overhead._check_hpsearch(folder, n_trials)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    counts: collections.Counter[str] = collections.Counter()
    patterns = [(row, kind, re.compile(p)) for row, kind, p in GROUPS]
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        kind, frames = _split(stack.split(";"))
        rest = ";".join(frames)
        for row, row_kind, pattern in patterns:
            if row_kind == kind and pattern.search(rest):
                counts[f"{kind}: {row}"] += int(n)
                break
        else:
            counts[f"{kind}: the rest"] += int(n)
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=20)
    p.add_argument("--large", type=int, default=620)
    p.add_argument("--rate", type=int, default=250, help="samples a second (default 250)")
    p.add_argument("--baseline", type=Path, help="another checkout, profiled the same way")
    p.add_argument("--keep", type=Path, help="keep py-spy's raw profiles in this folder")
    args = p.parse_args()
    setups = ["hpsearch"]
    if args.baseline is not None:
        overhead.BASELINE = args.baseline.resolve()
        setups.insert(0, "baseline")
    out = args.keep or Path(tempfile.mkdtemp(prefix="hpsearch-profiles-"))
    out.mkdir(parents=True, exist_ok=True)
    per_trial: dict[str, dict[str, float]] = {}
    span = args.large - args.small
    for setup in setups:
        small = _profile(setup, args.small, args.rate, out)
        large = _profile(setup, args.large, args.rate, out)
        per_trial[setup] = {
            key: 1000 * (large[key] - small[key]) / args.rate / span
            for key in set(small) | set(large)
        }
        print(f"{setup} done", file=sys.stderr)
    order = [f"{kind}: {row}" for row, kind, _ in GROUPS]
    keys = [k for k in order if any(k in v for v in per_trial.values())]
    keys += sorted({k for v in per_trial.values() for k in v} - set(keys))
    names = {"baseline": "from --baseline", "hpsearch": "this checkout"}
    rows = [(k, *(f"{per_trial[s].get(k, 0.0):.1f}" for s in setups)) for k in keys]
    rows.append(("all", *(f"{sum(per_trial[s].values()):.1f}" for s in setups)))
    print(
        f"\nCPU samples a trial, ms ({args.large} minus {args.small} trials, / {span}; "
        f"py-spy at {args.rate} Hz) — {machine()}\n"
    )
    print(table(["where", *(names[s] for s in setups)], rows))
    print(f"\nraw profiles: {out}")


if __name__ == "__main__":
    main()
