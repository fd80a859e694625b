"""hpsearch side by side with Ray Tune and the compute floor, on the same trials, in one run.

The work (``_peers_model.py``): the digits CNN (two conv layers, Adam, batch 64; one epoch is
4 passes over the 1,437 training images of scikit-learn's digits), ``--configs`` fixed
configurations (lr, channels 8/16/32, dropout), ``--epochs`` epochs, 2 trials at a time, one
torch thread each. Training is seeded by configuration and epoch, so the same trial reaches
the same accuracy in every system. Each system runs as its own command, timed whole
(start-up and shutdown included), as a user runs it:

- ``hpsearch``: ``hpsearch run study.yaml`` (``_peers_hpsearch.py``): a user objective that
  reads its configuration index from the grid sampler and calls ``ctx.save_checkpoint``
  every epoch; 2 workers, MLflow on (the run folder's SQLite store). Afterwards the script
  checks that every trial ended, its MLflow run is FINISHED and its checkpoint is on disk.
- ``ray``: Ray Tune (``_peers_ray.py``) in its own venv, ``benchmarks/.ray-venv``, made on
  first use (``ray[tune]==2.60.0``, ``torch==2.13.0``, scikit-learn; Ray is never a
  dependency of hpsearch): a function trainable, ``reuse_actors=True``, 2 CPUs, the
  configurations in the order hpsearch's grid sampler gives them; checkpoints every epoch
  with ``--ray-checkpoint``.
- ``floor``: the serial compute of the same trials, every epoch timed in one bare process
  (``python _peers_model.py``), divided by the 2 slots: no 2-slot system can beat it. With
  asha each system's floor is the compute of the trials and epochs it trained itself.

Rows: ``none`` (hpsearch ``scheduler: none`` against Ray's FIFO) and ``asha`` (hpsearch's
``scheduler: asha``, promotion, against Ray's ``ASHAScheduler``, stop-only; both rungs at
epochs 1 and 3 of 9, reduction factor 3). Columns: the whole command's wall, the part that
ran trials (hpsearch: first trial start to last trial end, from the study; Ray: its
``fit``) and the rest (start-up, shutdown), epochs trained, the best validation accuracy at
the last epoch, hpsearch's wall over Ray's, and each system's wall over its floor.
``--repeat`` runs everything that many times, interleaved, and prints medians.

    python benchmarks/peers.py [--configs 40] [--epochs 9] [--rows none,asha]
        [--systems hpsearch,ray,floor] [--repeat 1] [--ray-checkpoint] [--keep DIR] [--profile]

``--profile`` runs each row's hpsearch and Ray commands once more under ``py-spy record
--subprocesses`` (after the timed runs, so it slows none of them) and prints where the
workers' samples went: the objective's epoch loop, its checkpoints, the wait for the study's
reports, start-up and imports, the rest (needs ``pip install py-spy`` and the right to attach
to child processes). Ray's worker processes are profiled each on its own (``py-spy record
--pid``, attached once Ray has named them ``ray::...``, so their import of Ray itself is not
sampled); its driver and services are not.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RAY_VENV = HERE / ".ray-venv"
RAY_PACKAGES = ["ray[tune]==2.60.0", "torch==2.13.0", "scikit-learn"]
SLOTS = 2
ROWS = ("none", "asha")
SYSTEMS = ("hpsearch", "ray", "floor")
PEER = {"none": "FIFO", "asha": "ASHA (stop-only)"}
OURS = {"none": "none", "asha": "asha (promotion)"}


# ------------------------------------------------------------------ environments


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "MALLOC_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return {**env, **extra}


def ray_python() -> Path:
    """The Ray venv's interpreter, made on first use."""
    python = RAY_VENV / "bin" / "python"
    probe = [str(python), "-c", "import ray, torch, sklearn; print(ray.__version__)"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"making {RAY_VENV} ({', '.join(RAY_PACKAGES)}) ...", file=sys.stderr, flush=True)
    subprocess.run(["python3.11", "-m", "venv", str(RAY_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *RAY_PACKAGES], check=True)
    subprocess.run(probe, check=True, capture_output=True)
    return python


def grid_order(n_configs: int) -> list[int]:
    """The order in which the study's grid sampler (seed 0) hands out the indices: Ray gets
    them in this order too, so both start the same trials first."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.GridSampler({"config": list(range(n_configs))}, seed=0)
    study = optuna.create_study(sampler=sampler)
    order = []
    for _ in range(n_configs):
        trial = study.ask()
        order.append(trial.suggest_int("config", 0, n_configs - 1))
    return order


# ------------------------------------------------------------------ the systems


def _spy(out: Path | None) -> list[str]:
    if out is None:
        return []
    spy = shutil.which("py-spy") or "py-spy"
    return [spy, "record", "-s", "-r", "50", "-f", "raw", "-o", str(out), "--"]


def run_hpsearch(
    row: str, n_configs: int, epochs: int, folder: Path, spy: Path | None = None
) -> dict[str, Any]:
    import optuna
    from _peers_hpsearch import study_yaml

    name = f"peers-{row}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "study.yaml").write_text(study_yaml(name, n_configs, epochs, row))
    # The hpsearch of this interpreter's environment, activated or not.
    exe = Path(sys.executable).with_name("hpsearch")
    cmd = [*_spy(spy), str(exe), "run", "study.yaml", "--run-dir", "runs"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    (folder / "output.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"hpsearch {row} failed ({done.returncode}): {done.stderr[-3000:]}")

    from hpsearch.storage import open_storage

    study = optuna.load_study(
        study_name=name, storage=open_storage(f"journal://{folder}/runs/{name}/optuna.journal")
    )
    trials = study.get_trials(deepcopy=False)
    states = collections.Counter(t.state.name for t in trials)
    ended = states["COMPLETE"] + states["PRUNED"]
    problems = []
    if len(trials) != n_configs or ended != n_configs:
        problems.append(f"states {dict(states)}")
    if sorted(t.params.get("config", -1) for t in trials) != list(range(n_configs)):
        problems.append("not every configuration ran once")
    if row == "none" and states["COMPLETE"] != n_configs:
        problems.append(f"not all complete: {dict(states)}")
    ckpt = folder / "runs" / name / "checkpoints"
    missing = [t.number for t in trials if not (ckpt / f"trial-{t.number}.pt").exists()]
    if missing:
        problems.append(f"no checkpoint for trials {missing}")
    problems += _check_mlflow(folder, name, n_configs)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    at_end = [t.intermediate_values[epochs] for t in trials if epochs in t.intermediate_values]
    order = [t.params.get("config") for t in sorted(trials, key=lambda t: t.number)]
    return {
        "wall": wall,
        "inner": (max(ends) - min(starts)).total_seconds() if starts and ends else None,
        "epochs": sum(len(t.intermediate_values) for t in trials),
        "trained": {t.params["config"]: len(t.intermediate_values) for t in trials},
        "best": max(at_end) if at_end else None,
        "order": order,
        "problems": problems,
    }


def _check_mlflow(folder: Path, name: str, n_configs: int) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{folder}/runs/mlflow.db")
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return ["no MLflow experiment"]
    runs = client.search_runs([exp.experiment_id], max_results=10000)
    trial_runs = [r for r in runs if r.data.tags.get("hpsearch.trial_number") is not None]
    statuses = collections.Counter(r.info.status for r in trial_runs)
    if len(trial_runs) != n_configs or statuses["FINISHED"] != n_configs:
        return [f"MLflow trial runs {dict(statuses)}"]
    return []


def run_ray(
    row: str,
    n_configs: int,
    epochs: int,
    order: list[int],
    checkpoint: bool,
    folder: Path,
    spy: Path | None = None,
) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [str(ray_python()), str(HERE / "_peers_ray.py")]
    cmd += ["--order", ",".join(map(str, order)), "--configs", str(n_configs)]
    cmd += ["--epochs", str(epochs), "--scheduler", "asha" if row == "asha" else "fifo"]
    cmd += ["--folder", str(folder)] + (["--checkpoint"] if checkpoint else [])
    start = time.perf_counter()
    if spy is None:
        done = subprocess.run(cmd, cwd=folder, env=_env(), capture_output=True, text=True)
    else:
        done = _spy_ray_workers(cmd, folder, spy)
    wall = time.perf_counter() - start
    (folder / "output.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"Ray {row} failed ({done.returncode}): {done.stderr[-3000:]}")
    out = json.loads((folder / "result.json").read_text())
    trials = out["trials"]
    problems = [f"config {t['config']}: {t['error']}" for t in trials if t["error"]]
    if sorted(t["config"] for t in trials) != list(range(n_configs)):
        problems.append("not every configuration ran once")
    if checkpoint and not all(t["checkpoint"] for t in trials):
        problems.append("a trial without a checkpoint")
    at_end = [t["value"] for t in trials if t["epochs"] == epochs and t["value"] is not None]
    return {
        "wall": wall,
        "inner": out["fit_s"],
        "epochs": sum(t["epochs"] for t in trials),
        "trained": {t["config"]: t["epochs"] for t in trials},
        "best": max(at_end) if at_end else None,
        "problems": problems,
    }


def _spy_ray_workers(cmd: list[str], folder: Path, out: Path) -> Any:
    """Run Ray's command with ``py-spy record --pid`` on each of its worker processes.

    ``py-spy record --subprocesses`` does not see the thread that runs a function trainable:
    Ray's workers are started by its (native) raylet, and py-spy gives up on one it finds
    before its interpreter is up. Here each ``ray::`` process is attached once its title is
    set (its imports of Ray itself are done by then and not sampled), again if py-spy fails.
    The raw profiles are concatenated into ``out``."""
    import psutil

    spy = shutil.which("py-spy") or "py-spy"
    proc = subprocess.Popen(
        cmd, cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    box: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda k=k, f=f: box.__setitem__(k, f.read()))
        for k, f in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for t in readers:
        t.start()
    spies: dict[int, subprocess.Popen[bytes]] = {}
    files: list[Path] = []
    while proc.poll() is None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            try:
                title = " ".join(child.cmdline())
            except psutil.Error:
                continue
            running = spies.get(child.pid)
            if not title.startswith("ray::") or (running and running.poll() in (None, 0)):
                continue
            files.append(out.with_name(f"{out.stem}-{child.pid}-{len(files)}.txt"))
            record = [spy, "record", "--pid", str(child.pid), "-r", "50", "-f", "raw"]
            spies[child.pid] = subprocess.Popen(
                [*record, "-o", str(files[-1])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        time.sleep(0.2)
    for recorder in spies.values():
        try:
            recorder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            recorder.terminate()
    for t in readers:
        t.join()
    out.write_text("".join(f.read_text() for f in files if f.exists()))
    return subprocess.CompletedProcess(cmd, proc.returncode, box["stdout"], box["stderr"])


def run_floor(n_configs: int, epochs: int) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "_peers_model.py")]
    cmd += ["--configs", str(n_configs), "--epochs", str(epochs)]
    done = subprocess.run(
        cmd, env=_env(OMP_NUM_THREADS="1"), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def floor_row(floor: dict[str, Any], trained: dict[int, int], epochs: int) -> dict[str, Any]:
    """The floor of the trials and epochs ``trained`` (configuration -> epochs)."""
    seconds = sum(sum(floor["seconds"][c][:n]) for c, n in trained.items())
    at_end = [floor["accuracy"][c][epochs - 1] for c, n in trained.items() if n == epochs]
    return {
        "wall": seconds / SLOTS,
        "inner": None,
        "epochs": sum(trained.values()),
        "best": max(at_end) if at_end else None,
        "problems": [],
    }


# ------------------------------------------------------------------ the profile

#: (group, a pattern some frame of a training process's stack matches); first match wins.
GROUPS = [
    ("start-up: imports by the objective (torch, scikit-learn)", r"_peers_\w+\.py.*_find_and_load"),
    ("start-up: imports by the worker (Dask, MLflow, hpsearch; Ray)", r"_find_and_load"),
    (
        "objective: checkpoint (save, load)",
        r"save_checkpoint|load_checkpoint|CheckpointStore|torch/serialization|Checkpoint\.",
    ),
    ("waiting for the study's reports", r"reports_written"),
    ("objective: epoch loop (train, validate)", r"DigitsTrial\.(train_epoch|evaluate)"),
    ("objective: data and model set-up", r"load_data|DigitsTrial\.__init__"),
    ("MLflow", r"mlflow[/.]"),
    ("Optuna / hpsearch trial plumbing", r"optuna[/.]|hpsearch[/.]"),
    ("Dask / Ray worker machinery", r"distributed[/.]|tornado|asyncio|ray[/.]"),
    ("the rest", r"."),
    ("no Python frame (native threads, process start)", r""),
]


PROCESS = re.compile(r'process \d+:"[^"]*";?')


def _is_worker(procs: list[str]) -> bool:
    """A training process: a Dask worker (spawned by its nanny)."""
    last = procs[-1] if procs else ""
    return len(procs) > 1 and "spawn_main" in last and "resource_tracker" not in last


def summarise_profile(raw: Path, rate: int = 50, workers: bool = False) -> dict[str, float]:
    """Seconds of samples per group, in the training processes and in the rest (``workers``:
    every stack is a training process's, as in the profiles of Ray's workers)."""
    counts: collections.Counter[str] = collections.Counter()
    patterns = [(g, re.compile(p)) for g, p in GROUPS]
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        # A process frame's command line may hold ';' (Dask's ``-c ...; spawn_main(...)``).
        procs = PROCESS.findall(stack)
        rest = PROCESS.sub("", stack)
        if not workers and not _is_worker(procs):
            counts["the command's own process (coordinator, Dask scheduler)"] += int(n)
            continue
        for group, pattern in patterns:
            if pattern.search(rest):
                counts[f"workers: {group}"] += int(n)
                break
    return {k: v / rate for k, v in counts.items()}


def profile(args: argparse.Namespace, order: list[int], out: Path) -> None:
    if shutil.which("py-spy") is None:
        print("\n--profile: py-spy is not installed (pip install py-spy); no profile")
        return
    columns: dict[str, dict[str, float]] = {}
    walls: dict[str, float] = {}
    for row in args.rows:
        if "hpsearch" in args.systems:
            raw = out / f"profile-hpsearch-{row}.txt"
            r = run_hpsearch(row, args.configs, args.epochs, out / f"profile-hpsearch-{row}", raw)
            columns[f"hpsearch {row}"] = summarise_profile(raw)
            walls[f"hpsearch {row}"] = r["wall"]
        if "ray" in args.systems:
            raw = out / f"profile-ray-{row}.txt"
            r = run_ray(
                row,
                args.configs,
                args.epochs,
                order,
                args.ray_checkpoint,
                out / f"profile-ray-{row}",
                raw,
            )
            columns[f"Ray {row}"] = summarise_profile(raw, workers=True)
            walls[f"Ray {row}"] = r["wall"]
    keys = [f"workers: {g}" for g, _ in GROUPS]
    keys += sorted({k for c in columns.values() for k in c} - set(keys))
    keys = [k for k in keys if any(k in c for c in columns.values())]
    rows = []
    for k in keys:
        rows.append([k, *(f"{c.get(k, 0.0):.1f}" for c in columns.values())])
    rows.append(["wall under py-spy, s", *(f"{walls[c]:.1f}" for c in columns)])
    print(
        "\nWhere the samples went (py-spy at 50 Hz, on-CPU threads, seconds; hpsearch: every "
        "process of the command, Ray: its worker processes)"
    )
    print(table(["where", *columns], rows))
    worker_total = {
        c: sum(v for k, v in d.items() if k.startswith("workers")) for c, d in columns.items()
    }
    for c, d in columns.items():
        share = {
            k.removeprefix("workers: "): 100 * v / worker_total[c]
            for k, v in d.items()
            if k.startswith("workers") and worker_total[c]
        }
        top = ", ".join(
            f"{k} {v:.0f} %" for k, v in sorted(share.items(), key=lambda kv: -kv[1]) if v >= 1
        )
        print(f"- {c}: of the training processes' samples, {top}")


# ------------------------------------------------------------------ main


def _median(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=40)
    p.add_argument("--epochs", type=int, default=9)
    p.add_argument("--rows", default="none,asha")
    p.add_argument("--systems", default="hpsearch,ray,floor")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--ray-checkpoint", action="store_true", help="Ray checkpoints every epoch")
    p.add_argument("--keep", type=Path, help="keep every run folder (and profile) here")
    p.add_argument("--profile", action="store_true", help="py-spy profiles, after the timings")
    args = p.parse_args()
    args.rows = [r for r in args.rows.split(",") if r]
    args.systems = [s for s in args.systems.split(",") if s]
    for r in args.rows:
        if r not in ROWS:
            p.error(f"--rows: unknown row {r!r} (allowed: {', '.join(ROWS)})")
    for s in args.systems:
        if s not in SYSTEMS:
            p.error(f"--systems: unknown system {s!r} (allowed: {', '.join(SYSTEMS)})")

    if "ray" in args.systems:
        print(f"Ray: {ray_python()}", file=sys.stderr)
    order = grid_order(args.configs)
    out = args.keep or Path(tempfile.mkdtemp(prefix="hpsearch-peers-"))
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    floors: list[dict[str, Any]] = []
    notes: list[str] = []
    try:
        for rep in range(args.repeat):
            if "floor" in args.systems:
                floors.append(run_floor(args.configs, args.epochs))
                print(f"[{rep}] floor: {floors[-1]['total']:.1f} s serial", file=sys.stderr)
            for row in args.rows:
                for system in args.systems:
                    where = out / f"{system}-{row}-{rep}"
                    if system == "hpsearch":
                        r = run_hpsearch(row, args.configs, args.epochs, where)
                        if r["order"] != order:
                            notes.append(
                                f"hpsearch {row}: the grid sampler gave {r['order']}, "
                                f"Ray was given {order}"
                            )
                    elif system == "ray":
                        r = run_ray(
                            row, args.configs, args.epochs, order, args.ray_checkpoint, where
                        )
                    else:
                        continue
                    runs[system, row].append(r)
                    print(
                        f"[{rep}] {system} {row}: {r['wall']:.1f} s, {r['epochs']} epochs, "
                        f"best {r['best']}",
                        file=sys.stderr,
                        flush=True,
                    )
                    notes += [f"{system} {row}: {x}" for x in r["problems"]]
        if args.profile:
            profile(args, order, out)
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)

    # The floor of each repeat, for the trials and epochs each system trained (with no
    # pruning every trial to its end, whoever ran).
    for row in args.rows:
        for rep, fl in enumerate(floors):
            for system in ("hpsearch", "ray"):
                if row == "none":
                    trained = {c: args.epochs for c in range(args.configs)}
                elif runs.get((system, row)):
                    trained = runs[system, row][rep]["trained"]
                else:
                    continue
                runs[f"floor:{system}", row].append(floor_row(fl, trained, args.epochs))
                if row == "none":
                    break

    def floor_of(system: str, row: str) -> list[dict[str, Any]]:
        return runs.get((f"floor:{system}", row)) or runs.get(("floor:hpsearch", row)) or []

    rows = []
    for row in args.rows:
        lines: list[tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]] = []
        for system, name, sched in (
            ("hpsearch", "hpsearch", OURS[row]),
            ("ray", "Ray Tune", PEER[row]),
        ):
            if runs.get((system, row)):
                lines.append((name, sched, runs[system, row], floor_of(system, row)))
        floor_names = {"hpsearch": "floor (serial / 2)", "ray": "floor (serial / 2)"}
        if row != "none" and all(runs.get((f"floor:{s}", row)) for s in ("hpsearch", "ray")):
            floor_names = {
                "hpsearch": "floor of hpsearch's epochs",
                "ray": "floor of Ray's epochs",
            }
        for system in ("hpsearch", "ray"):
            if runs.get((f"floor:{system}", row)):
                lines.append((floor_names[system], "-", runs[f"floor:{system}", row], []))
        ray_wall = _median([r["wall"] for r in runs.get(("ray", row), [])])
        for name, sched, rs, fl in lines:
            wall = _median([r["wall"] for r in rs])
            walls = [r["wall"] for r in rs]
            inner = _median([r["inner"] for r in rs])
            best = _median([r["best"] for r in rs])
            floor_wall = _median([r["wall"] for r in fl])
            vs_ray = wall / ray_wall if name == "hpsearch" and ray_wall else None
            vs_floor = wall / floor_wall if floor_wall else None
            rows.append(
                [
                    row,
                    name,
                    sched,
                    f"{wall:.1f}",
                    f"{min(walls):.1f}-{max(walls):.1f}" if len(rs) > 1 else "",
                    "-" if inner is None else f"{inner:.1f}",
                    "-" if inner is None else f"{wall - inner:.1f}",
                    int(_median([r["epochs"] for r in rs])),
                    "-" if best is None else f"{best:.4f}",
                    "-" if vs_ray is None else f"{vs_ray:.2f}",
                    "-" if vs_floor is None else f"{vs_floor:.2f}",
                ]
            )
    ckpt = "checkpoints every epoch" if args.ray_checkpoint else "no checkpoints"
    print(
        f"\n{args.configs} configurations x {args.epochs} epochs, {SLOTS} trials at a time, "
        f"1 torch thread each; Ray: {ckpt}; median of {args.repeat} ({machine()})"
    )
    print(
        table(
            [
                "row",
                "system",
                "scheduler",
                "wall s",
                "range",
                "trials s",
                "outside trials s",
                "epochs trained",
                f"best at {args.epochs}",
                "/ Ray",
                "/ floor",
            ],
            rows,
        )
    )
    if floors:
        serial = statistics.median(f["total"] for f in floors)
        print(f"\nserial compute of every trial to its end: {serial:.1f} s")
    for note in dict.fromkeys(notes):
        print(f"note: {note}")
    if args.keep:
        print(f"run folders: {args.keep}")


if __name__ == "__main__":
    main()
