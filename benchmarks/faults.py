"""What faults cost: CPU-slot-seconds lost when a worker is killed every N seconds.

The same study runs three times on a fresh local cluster of worker processes: without
faults; with a worker SIGKILLed every ``--every`` seconds (``--kills`` times, always the
worker of the trial furthest along), its trial resuming from its
last checkpoint (hpsearch's default); and with the same kills but no checkpoints
(``checkpoint_interval: null``), so a lost trial starts again from scratch, as a plain
retry would. Lost slot-seconds are the run's slot-seconds (wall time x slots) minus those
of the run without faults; epochs redone are counted from what each killed trial had
reported and where it resumed.

    python benchmarks/faults.py [--every 10] [--kills 4] [--n-trials 6] [--epochs 16]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from _common import machine, table

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")
SLOTS = 2


def spec(name: str, n_trials: int, epochs: int, checkpoints: bool) -> dict:
    return {
        "name": name,
        "objective": {
            "model": "cnn",
            "dataset": {"name": "digits", "size": 28},
            "epochs": epochs,
            "precision": "fp32",
            "checkpoint_interval": 0 if checkpoints else None,
            "params": {"batch_size": 32, "channels": 16, "n_blocks": 2},
        },
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
        "search": {
            "n_trials": n_trials,
            "sampler": "random",
            "pruner": "none",
            "seed": 0,
            "max_retries": 100,
        },
    }


def run(
    name: str,
    folder: Path,
    n_trials: int,
    epochs: int,
    *,
    checkpoints: bool,
    every: float | None,
    max_kills: int = 0,
) -> dict:
    from distributed import Client

    from hpsearch import Study
    from hpsearch.cluster import start_local_cluster

    cluster = start_local_cluster(n_workers=SLOTS, gpus_per_trial=1)
    client = Client(cluster)
    try:
        client.wait_for_workers(SLOTS)
        study = Study(spec(name, n_trials, epochs, checkpoints), run_dir=folder, client=client)
        done = threading.Event()
        start = time.perf_counter()
        thread = threading.Thread(target=lambda: (study.run(), done.set()), daemon=True)
        thread.start()
        kills, redone_at_kill = 0, []
        while every is not None and kills < max_kills and not done.wait(every):
            victim = _most_advanced(study, client)
            if victim is None:
                continue
            trial, address = victim
            pid = client.run(os.getpid, workers=[address]).get(address)
            if pid:
                os.kill(pid, signal.SIGKILL)
                kills += 1
                redone_at_kill.append((trial.number, len(trial.intermediate_values)))
        thread.join()
        wall = time.perf_counter() - start
        trials = study.optuna_study().get_trials()
        redone = 0
        for number, reported in redone_at_kill:
            resumed = _resumed_from(study, number, checkpoints)
            redone += max(0, reported - resumed)
        return {
            "wall": wall,
            "kills": kills,
            "redone": redone,
            "complete": sum(t.state.name == "COMPLETE" for t in trials),
        }
    finally:
        client.close()
        cluster.close(timeout=20)


def _most_advanced(study, client):
    """The running trial with the most epochs reported, and the worker running it."""
    try:
        running = study.optuna_study().get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
        )
    except KeyError:
        return None
    processing = client.processing()
    best = None
    for t in running:
        for address, keys in processing.items():
            ours = any(f"-trial-{t.number}-" in str(k) for k in keys)
            if (
                ours
                and t.intermediate_values
                and (best is None or len(t.intermediate_values) > len(best[0].intermediate_values))
            ):
                best = (t, address)
    return best


def _resumed_from(study, number: int, checkpoints: bool) -> int:
    """The last epoch whose checkpoint the killed attempt left (what the next attempt skips)."""
    if not checkpoints:
        return 0
    from hpsearch.tracking import get_client

    # The next attempt's run tag says where it resumed; the smallest of the attempts is
    # what matters for the kill counted here (a trial killed twice resumes twice).
    client = get_client(study.mlflow_uri)
    exp = client.get_experiment_by_name(study.experiment)
    runs = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.`hpsearch.trial_number` = '{number}'"
    )
    return int(runs[0].data.tags.get("hpsearch.resumed_from_epoch", 0)) if runs else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=10.0, help="seconds between worker kills")
    parser.add_argument("--n-trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument(
        "--kills", type=int, default=4, help="kills per run (then the run is left to finish)"
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-faults-"))
    base = run("baseline", folder, args.n_trials, args.epochs, checkpoints=True, every=None)
    resume = run(
        "resume",
        folder,
        args.n_trials,
        args.epochs,
        checkpoints=True,
        every=args.every,
        max_kills=args.kills,
    )
    scratch = run(
        "scratch",
        folder,
        args.n_trials,
        args.epochs,
        checkpoints=False,
        every=args.every,
        max_kills=args.kills,
    )
    rows = []
    for label, r in (
        ("no faults", base),
        ("kills, resume from checkpoint (hpsearch)", resume),
        ("kills, restart from scratch", scratch),
    ):
        slot_s = r["wall"] * SLOTS
        lost = slot_s - base["wall"] * SLOTS
        rows.append(
            (
                label,
                r["kills"],
                f"{r['complete']}/{args.n_trials}",
                f"{r['wall']:.1f}",
                f"{slot_s:.1f}",
                "-" if r is base else f"{lost:.1f}",
                "-" if r is base else r["redone"],
            )
        )
    print(
        f"\nFaults — {args.n_trials} CNN trials x {args.epochs} epochs "
        f"on {SLOTS} worker processes, "
        f"a worker SIGKILLed every {args.every:g} s ({args.kills} times; "
        f"the most advanced trial's); {machine()}\n"
    )
    print(
        table(
            ["run", "kills", "complete", "wall s", "slot-s", "slot-s lost", "epochs redone"], rows
        )
    )


if __name__ == "__main__":
    main()
