"""A soak run: one long study of short trials, with faults along the way, checked at the end.

``hpsearch run`` runs a study of ``--trials`` trials on ``--workers`` local worker processes:
the test kit's trivial objective (``hpsearch.testing.objectives:trivial``), and every 100th
trial a real CNN (PyTorch, the digits images, 5 epochs, each reported and checkpointed).
Tracking goes to an ``mlflow server`` that this script starts on 127.0.0.1 in its own
process group. Random sampler, so that the sampler's own growth with the history (TPE's)
stays out of the figures.

Along the way, at set fractions of the budget (read from the study's Prometheus endpoint):

- worker processes SIGKILLed at random moments (``--kills``, between 15 % and 75 %);
  Dask's nanny starts each again, and the trial it ran resumes from its checkpoint;
- the tracking server killed and started again on the same port (at 35 %);
- the coordinator killed (SIGKILL to ``hpsearch run`` and its workers) and the same
  command run again (at 55 %): it resumes the study.

At the end it checks and prints: exactly ``--trials`` trials ended, none RUNNING in Optuna
or in MLflow, one MLflow run per trial, every reported step in MLflow once; the memory
(RSS) of the last coordinator and of each worker near its start and at the end; and the
orchestration cost per trial (wall between completions / trials) of the first and the last
200 trials. It exits non-zero when a check fails.

With ``--trace`` the coordinator's growth is also split: its RSS, what Python allocated in
it since 50 trials after its start and still holds (``tracemalloc``, one frame, started then:
see ``_traced.py``), the tracer's own table, and the rest (the allocator's: freed memory glibc
keeps, fragmentation). Tracing is not free: its table grows the RSS about as much as what it
traces, and it slows the coordinator (the cost per trial is not comparable then).

``--plain`` runs the same study with trivial trials only and no faults, as a baseline.

    python benchmarks/soak.py [--trials 2000] [--workers 4] [--kills 8] [--seed 0] [--plain]
                              [--trace]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table

HERE = Path(__file__).resolve().parent
NAME = "soak"
WINDOW = 200  # trials in each window of the cost per trial
CNN_EVERY = 100  # every 100th trial (numbers ending in 50) trains a real CNN
MIB = 1024 * 1024

OBJECTIVE = f'''\
"""The soak study's objective: the test kit's trivial objective, and now and then a CNN."""

import torch  # every worker loads it with its first trial: its memory is there from the start
from hpsearch.testing.objectives import trivial

EPOCHS = 5


CNN = {{cnn}}


def objective(trial, ctx):
    if CNN and trial.number % {CNN_EVERY} == {CNN_EVERY // 2}:
        return cnn(trial, ctx)
    return trivial(trial)


def cnn(trial, ctx):
    """A small CNN on the 8x8 digits images, checkpointed after every epoch."""
    from sklearn.datasets import load_digits

    torch.set_num_threads(1)
    torch.manual_seed(trial.number)
    lr = trial.suggest_float("lr", 1e-3, 1e-2, log=True)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(y)
    x_train, y_train, x_val, y_val = x[:1400], y[:1400], x[1400:], y[1400:]
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    state = ctx.load_checkpoint()
    first = 1
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["epoch"] + 1
    accuracy = 0.0
    for epoch in range(first, EPOCHS + 1):
        model.train()
        for i in range(0, len(x_train), 64):
            opt.zero_grad()
            batch = slice(i, i + 64)
            loss = torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            accuracy = float((model(x_val).argmax(1) == y_val).float().mean())
        trial.report(1.0 - accuracy, epoch)
        ctx.save_checkpoint(
            {{"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}}, epoch
        )
    return 1.0 - accuracy
'''

STUDY = """\
name: {name}
objective:
  model: soak_objective:objective
  direction: minimize
search:
  n_trials: {n_trials}
  sampler: random
  pruner: none
  seed: {seed}
  max_retries: 5
tracking:
  mlflow_uri: {uri}
cluster:
  n_workers: {workers}
  gpus: none
  metrics: {{port: {metrics_port}, host: 127.0.0.1}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s")


class TrackingServer:
    """``mlflow server`` on 127.0.0.1 (SQLite), in its own process group."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.folder / 'mlflow.db'}",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            # no job runner (MLflow's GenAI evaluation jobs): the server is one process
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        wait_http(f"{self.uri}/health", 180)

    def restart_later(self, pause: float) -> threading.Thread:
        """Start it again after ``pause`` seconds, in the background (the study goes on)."""
        thread = threading.Thread(
            target=lambda: (time.sleep(pause), self.start()), name="tracking-restart"
        )
        thread.start()
        return thread

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


@dataclass
class Samples:
    """RSS samples of the coordinator and its workers (by pid): (trials ended, bytes)."""

    coordinator: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    workers: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: The coordinator's traced Python allocations since its tracing began, by pid:
    #: (trials ended, bytes traced, bytes of the tracer itself).
    traced: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)


def ended_trials(metrics_url: str) -> int | None:
    """Trials ended so far, from the study's Prometheus endpoint (None when it is down)."""
    try:
        text = urllib.request.urlopen(metrics_url, timeout=2).read().decode()
    except OSError:
        return None
    ended = 0
    for line in text.splitlines():
        if line.startswith("hpsearch_trials{") and 'state="running"' not in line:
            ended += int(float(line.rsplit(" ", 1)[1]))
    return ended


def worker_processes(coordinator: Any) -> list[Any]:
    """The coordinator's worker processes (children started by Dask's nannies)."""
    import psutil

    out = []
    try:
        for child in coordinator.children(recursive=True):
            try:
                cmd = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "spawn_main" in cmd or "forkserver" in cmd:
                out.append(child)
    except psutil.Error:
        pass
    return out


class Soak:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.folder = folder
        self.server = TrackingServer(folder)
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.samples = Samples()
        self.events: list[str] = []
        self.kills = 0
        self.coordinator: subprocess.Popen[str] | None = None
        self.runs = 0
        self.trace_dir: Path | None = None
        self.log = open(folder / "hpsearch-run.log", "w")  # noqa: SIM115

    def write_study(self) -> Path:
        (self.folder / "soak_objective.py").write_text(
            OBJECTIVE.replace("{cnn}", str(not self.args.plain))
        )
        study = self.folder / "soak.yaml"
        study.write_text(
            STUDY.format(
                name=NAME,
                n_trials=self.args.trials,
                seed=self.args.seed,
                uri=self.server.uri,
                workers=self.args.workers,
                metrics_port=self.metrics_port,
            )
        )
        return study

    def start_coordinator(self, study: Path) -> None:
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        self.runs += 1
        self.log.write(f"---- hpsearch run #{self.runs}\n")
        self.log.flush()
        command = [sys.executable, "-m", "hpsearch.cli", "run", str(study)]
        if self.args.trace:  # the same command, traced from 50 trials on (see _traced.py)
            self.trace_dir = self.folder / f"trace-{self.runs}"
            self.trace_dir.mkdir()
            command = [sys.executable, str(HERE / "_traced.py"), str(self.trace_dir)]
            command += ["run", str(study)]
        self.coordinator = subprocess.Popen(
            command,
            cwd=self.folder,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def sample(self, ended: int) -> None:
        import psutil

        assert self.coordinator is not None
        try:
            proc = psutil.Process(self.coordinator.pid)
            rss = proc.memory_info().rss
        except psutil.Error:
            return
        points = self.samples.coordinator.setdefault(proc.pid, [])
        points.append((ended, rss))
        if self.trace_dir is not None:
            self.sample_traced(proc.pid, ended, points[0][0])
        for worker in worker_processes(proc):
            try:
                self.samples.workers.setdefault(worker.pid, []).append(
                    (ended, worker.memory_info().rss)
                )
            except psutil.Error:
                continue

    def sample_traced(self, pid: int, ended: int, born: int) -> None:
        """The coordinator's traced bytes; tracing starts 50 trials after its first sample
        (where the memory table's figures start)."""
        import json

        assert self.trace_dir is not None
        start = self.trace_dir / "trace-start"
        if not start.exists():
            if ended >= born + 50:
                start.touch()
            return
        try:
            read = json.loads((self.trace_dir / "traced.json").read_text())
        except (OSError, ValueError):
            return
        self.samples.traced.setdefault(pid, []).append((ended, read["traced"], read["tracer"]))

    def kill_a_worker(self, rng: random.Random) -> None:
        import psutil

        assert self.coordinator is not None
        try:
            workers = worker_processes(psutil.Process(self.coordinator.pid))
        except psutil.Error:
            return
        if workers:
            victim = rng.choice(workers)
            try:
                victim.kill()
                self.kills += 1
            except psutil.Error:
                pass

    def run(self) -> float:
        args = self.args
        n = args.trials
        rng = random.Random(args.seed)
        kill_at = sorted(rng.randint(int(0.15 * n), int(0.75 * n)) for _ in range(args.kills))
        tracking_at, coordinator_at = int(0.35 * n), int(0.55 * n)
        if args.plain:  # no faults: the baseline
            kill_at, tracking_at, coordinator_at = [], n + 1, n + 1
        self.server.start()
        study = self.write_study()
        start = time.monotonic()
        self.start_coordinator(study)
        restarted_tracking = restarted_coordinator = False
        restart: threading.Thread | None = None
        assert self.coordinator is not None
        while self.coordinator.poll() is None:
            time.sleep(0.5)
            ended = ended_trials(self.metrics_url)
            if ended is None:
                continue
            self.sample(ended)
            while kill_at and ended >= kill_at[0]:
                kill_at.pop(0)
                self.kill_a_worker(rng)
            if not restarted_tracking and ended >= tracking_at:
                restarted_tracking = True
                self.events.append(f"tracking server killed at {ended} trials")
                self.server.stop(signal.SIGKILL)
                restart = self.server.restart_later(5)  # the workers keep their writes meanwhile
            if not restarted_coordinator and ended >= coordinator_at:
                restarted_coordinator = True
                self.events.append(f"coordinator killed at {ended} trials")
                os.killpg(self.coordinator.pid, signal.SIGKILL)
                self.coordinator.wait()
                if restart is not None:  # `hpsearch run` starts only with its tracking store up
                    restart.join()
                self.start_coordinator(study)
        wall = time.monotonic() - start
        if restart is not None:
            restart.join()
        if not restarted_coordinator and not args.plain:
            raise RuntimeError(
                "the study ended before the coordinator was restarted; "
                f"see {self.folder / 'hpsearch-run.log'}"
            )
        if self.coordinator.returncode != 0:
            raise RuntimeError(
                f"hpsearch run failed ({self.coordinator.returncode}); "
                f"see {self.folder / 'hpsearch-run.log'}"
            )
        return wall


def check_study(folder: Path, n_trials: int) -> tuple[list[tuple[str, str, bool]], Any]:
    import optuna

    from hpsearch.storage import open_storage

    study = optuna.load_study(
        study_name=NAME, storage=open_storage(f"journal://{folder}/runs/{NAME}/optuna.journal")
    )
    trials = study.get_trials(deepcopy=False)
    states = {s.name: sum(t.state == s for t in trials) for s in optuna.trial.TrialState}
    ended = sum(t.state.is_finished() for t in trials)
    again = sum(int(t.user_attrs.get("hpsearch.attempt", 1)) > 1 for t in trials)
    rows = [
        (
            "trials ended (Optuna)",
            f"{ended} of {n_trials}: " + ", ".join(f"{k} {v}" for k, v in states.items() if v),
            ended == n_trials and len(trials) == n_trials,
        ),
        ("trials RUNNING in Optuna", str(states["RUNNING"]), states["RUNNING"] == 0),
        ("trials run more than once (resumed)", str(again), True),
    ]
    return rows, study


def check_mlflow(uri: str, n_trials: int) -> list[tuple[str, str, bool]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(NAME)
    if exp is None:
        return [("MLflow experiment", "missing", False)]
    runs = client.search_runs([exp.experiment_id], max_results=50000)
    trial_runs = [r for r in runs if "hpsearch.trial_number" in r.data.tags]
    numbers = sorted(int(r.data.tags["hpsearch.trial_number"]) for r in trial_runs)
    running = [r for r in runs if r.info.status == "RUNNING"]

    def twice(run: Any) -> tuple[int, int]:
        logged = twice = 0
        for key in run.data.metrics:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            logged += len(steps)
            twice += len(steps) - len(set(steps))
        return logged, twice

    reporting = [r for r in trial_runs if "value" in r.data.metrics or "lr" in r.data.params]
    with ThreadPoolExecutor(8) as pool:
        counted = list(pool.map(twice, reporting))
    logged = sum(c[0] for c in counted)
    doubled = sum(c[1] for c in counted)
    return [
        (
            "MLflow trial runs",
            f"{len(trial_runs)} ({len(set(numbers))} trials)",
            numbers == list(range(n_trials)),
        ),
        ("MLflow runs RUNNING", str(len(running)), not running),
        (
            "MLflow steps logged twice",
            f"{doubled} of {logged} points in {len(reporting)} runs",
            doubled == 0,
        ),
    ]


def memory_rows(samples: Samples, n_trials: int) -> list[list[Any]]:
    """RSS near each process's start (its first sample 50 trials in, when it lived that
    long) and at its last sample, for the last coordinator and the workers it ended with."""
    rows: list[list[Any]] = []
    last_coordinator = max(samples.coordinator, key=lambda pid: samples.coordinator[pid][0][0])
    final = samples.coordinator[last_coordinator]
    born = final[0][0]
    living = [
        pid
        for pid, points in samples.workers.items()
        if points[0][0] >= born and points[-1][0] >= final[-1][0] - 10
    ]

    def row(what: str, points: list[tuple[int, int]]) -> list[Any]:
        warm = [p for p in points if p[0] >= points[0][0] + 50] or points
        first, last = warm[0], points[-1]
        trials = max(1, last[0] - first[0])
        growth = (last[1] - first[1]) / MIB
        return [
            what,
            f"{first[0]}-{last[0]}",
            first[1] / MIB,
            last[1] / MIB,
            growth,
            1000 * growth / trials,
        ]

    rows.append(row(f"coordinator (pid {last_coordinator})", final))
    for pid in sorted(living):
        rows.append(row(f"worker (pid {pid})", samples.workers[pid]))
    return rows


def traced_rows(samples: Samples) -> tuple[str, list[list[Any]]]:
    """The last coordinator's growth, split: RSS, Python's live allocations, the tracer; and
    the trials it spans."""
    last_coordinator = max(samples.coordinator, key=lambda pid: samples.coordinator[pid][0][0])
    traced = samples.traced.get(last_coordinator)
    if not traced:
        return "", []
    rss = dict(samples.coordinator[last_coordinator])
    first, last = traced[0], traced[-1]
    trials = max(1, last[0] - first[0])
    before = [r for n, r in samples.coordinator[last_coordinator] if n <= first[0]]
    rss_growth = (rss[last[0]] - (before[-1] if before else rss[first[0]])) / MIB
    python = (last[1] - first[1]) / MIB
    tracer = (last[2] - first[2]) / MIB
    rest = rss_growth - python - tracer
    per = 1000 / trials
    return f"{first[0]}-{last[0]}", [
        ["RSS", rss_growth, per * rss_growth],
        ["Python objects (traced, alive)", python, per * python],
        ["tracemalloc's own table", tracer, per * tracer],
        ["the rest (allocator: freed pages kept, fragmentation)", rest, per * rest],
    ]


def cost_rows(study: Any, workers: int) -> list[list[Any]]:
    done = sorted(t.datetime_complete for t in study.get_trials(deepcopy=False))
    window = min(WINDOW, len(done) // 5)
    first = (done[window] - done[0]).total_seconds()
    last = (done[-1] - done[-1 - window]).total_seconds()
    return [
        [f"first {window} trials", 1000 * first / window, 1000 * first * workers / window],
        [f"last {window} trials", 1000 * last / window, 1000 * last * workers / window],
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--kills", type=int, default=8, help="worker processes SIGKILLed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", action="store_true", help="keep the study folder")
    p.add_argument(
        "--trace",
        action="store_true",
        help="split the coordinator's growth: tracemalloc in it from 50 trials on (slows it)",
    )
    p.add_argument(
        "--plain",
        action="store_true",
        help="the baseline: trivial trials only, no faults (memory and cost without them)",
    )
    args = p.parse_args()
    if args.trials < 2 * CNN_EVERY:
        p.error("--trials: at least 200 (the fault schedule and the cost windows need room)")
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-soak-"))
    soak = Soak(args, folder)
    load = os.getloadavg()
    ok = True
    try:
        wall = soak.run()
        checks, study = check_study(folder, args.trials)
        checks += check_mlflow(soak.server.uri, args.trials)
    finally:
        if soak.coordinator is not None and soak.coordinator.poll() is None:
            os.killpg(soak.coordinator.pid, signal.SIGKILL)
        soak.server.stop()
        soak.log.close()
    load_end = os.getloadavg()
    print(
        f"machine: {machine()}; load average {load[0]:.1f} at the start, "
        f"{load_end[0]:.1f} at the end"
    )
    print(
        f"{args.trials} trials on {args.workers} workers in {wall:.0f} s; faults: "
        f"{soak.kills} worker processes killed, " + ", ".join(soak.events)
    )
    print()
    print(table(["check", "result", "ok"], [[a, b, "yes" if c else "NO"] for a, b, c in checks]))
    print()
    print(
        table(
            [
                "process",
                "trials ended",
                "RSS start MiB",
                "RSS end MiB",
                "growth MiB",
                "MiB/1000 trials",
            ],
            memory_rows(soak.samples, args.trials),
        )
    )
    span, split = traced_rows(soak.samples)
    if split:
        print()
        print(f"the coordinator's growth, split (trials {span}):")
        print(table(["what", "growth MiB", "MiB/1000 trials"], split))
    print()
    print(
        table(
            ["window", "ms/trial (wall)", "ms/trial per worker"],
            cost_rows(study, args.workers),
        )
    )
    ok = all(c[2] for c in checks)
    if args.keep:
        print(f"\nkept {folder}")
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
