"""The simulated cluster against reality: a real asha study on 2 CPU slots, then the same
study replayed on 2 simulated workers from its own records.

    python benchmarks/replay.py [--trials 18] [--epochs 9] [--run-dir benchmarks/out/replay]

The real study is ``studies/digits-asha.yaml`` with a random sampler (seed 0: a replay asks
the same configurations), ``--trials`` trials of ``--epochs`` epochs, on the embedded
default (a local Dask cluster of 2 worker processes). The replay is ``objective.model:
replay`` on that run folder: each trial's reported values and the seconds of each of its
epochs (MLflow's ``epoch_s``), each start's cost read from the records too. It prints the
study's span (first trial's start to the last one's end) real and simulated, and whether
each trial reached the same epoch and ended in the same state (the same promotions). The
records hold each epoch's seconds but not what each start of a trial costs beyond them (the
worker's hand-over, the MLflow run, the checkpoint, the coordinator's turn); a second row
calibrates that cost on the same run (the slots' busy time not spent in epochs, per start),
and the last rows use it for 8 and 32 simulated workers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpsearch.simulation import simulate  # noqa: E402
from hpsearch.spec import StudySpec  # noqa: E402


def _real(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    spec = yaml.safe_load((ROOT / "studies" / "digits-asha.yaml").read_text())
    spec["name"] = "replay-real"
    spec["objective"]["epochs"] = args.epochs
    spec["search"].update(n_trials=args.trials, sampler="random", seed=0)
    spec["cluster"] = {"slots": 2, "gpus": "none"}
    path = run_dir / "replay-real.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "hpsearch.cli", "run", str(path), "--run-dir", str(run_dir)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    command_s = time.perf_counter() - started
    study = optuna.load_study(
        study_name="replay-real",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(
                str(run_dir / "replay-real" / "optuna.journal")
            )
        ),
    )
    trials = study.get_trials(deepcopy=False)
    first = min(t.datetime_start for t in trials if t.datetime_start)
    last = max(t.datetime_complete for t in trials if t.datetime_complete)
    return {
        "span_s": (last - first).total_seconds(),
        "command_s": command_s,
        "ended": {t.number: (t.state.name, max(t.intermediate_values)) for t in trials},
        "spec": spec,
    }


def _replayed(
    real: dict[str, Any], run_dir: Path, workers: int, startup: float | None = None
) -> Any:
    spec = dict(real["spec"])
    spec["name"] = f"replay-{workers}"
    spec["objective"] = {
        "model": "replay",
        "dataset": {"name": "replay", "study": str(run_dir / "replay-real")},
        "epochs": spec["objective"]["epochs"],
    }
    spec["space"] = None  # the recorded study's
    simulated: dict[str, Any] = {"workers": workers}
    if startup is not None:
        simulated["startup"] = startup
    spec["cluster"] = {"backend": "simulated", "simulated": simulated}
    spec = {k: v for k, v in spec.items() if v is not None}
    return simulate(StudySpec.from_dict(spec), study_dir=run_dir / f"replay-{workers}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=18)
    parser.add_argument("--epochs", type=int, default=9)
    parser.add_argument("--run-dir", default="benchmarks/out/replay")
    args = parser.parse_args()
    run_dir = Path(args.run_dir).resolve()
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh real study every time
    run_dir.mkdir(parents=True)
    real = _real(args, run_dir)
    sim = _replayed(real, run_dir, 2)

    def same_as_real(one: Any) -> list[int]:
        ended = {
            t.number: (t.state.name, max(t.intermediate_values))
            for t in one.study.get_trials(deepcopy=False)
        }
        return [n for n in real["ended"] if real["ended"][n] == ended.get(n)]

    same = same_as_real(sim)
    print("| run | study span (s) | ratio to real | trials reaching the same epoch and state |")
    print("|---|---:|---:|---:|")
    print(
        f"| real, 2 slots (whole command {real['command_s']:.1f} s) | {real['span_s']:.1f} | 1 | |"
    )
    ratio = sim.simulated_s / real["span_s"]
    print(
        f"| simulated, 2 workers | {sim.simulated_s:.1f} | {ratio:.3f} | "
        f"{len(same)} of {len(real['ended'])} |"
    )
    # What the records lack: each start's cost on this machine (process hand-over, MLflow run,
    # checkpoint, the coordinator's turn). Calibrated on this same run: the 2 slots' busy
    # time not spent in the recorded epochs, per start.
    starts = len(sim.segments)
    cost = max(0.0, (2 * real["span_s"] - sim.device_hours * 3600) / starts)
    cost += float(sim.study.user_attrs.get("startup", 0.0))
    calibrated = _replayed(real, run_dir, 2, startup=cost)
    print(
        f"| simulated, 2 workers, {cost:.2f} s a start (calibrated) | "
        f"{calibrated.simulated_s:.1f} | {calibrated.simulated_s / real['span_s']:.3f} | "
        f"{len(same_as_real(calibrated))} of {len(real['ended'])} |"
    )
    for workers in (8, 32):
        more = _replayed(real, run_dir, workers, startup=cost)
        print(
            f"| simulated, {workers} workers, {cost:.2f} s a start | {more.simulated_s:.1f} | "
            f"{more.simulated_s / real['span_s']:.3f} | |"
        )


if __name__ == "__main__":
    main()
