"""A pool that several studies share, started by ``hpsearch pool start`` (real processes: the
pool's scheduler and workers, coordinators as ``hpsearch run`` or a client of their own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

HPSEARCH = [sys.executable, "-m", "hpsearch.cli"]


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*HPSEARCH, *args], capture_output=True, text=True, timeout=180)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A pool of 4 CPU slots (one worker each) with a 3-second lease expiry."""
    folder = tmp_path_factory.mktemp("pool")
    _cli(
        "pool",
        "start",
        "--gpus",
        "none",
        "--slots",
        "4",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--lease-ttl",
        "3",
        "--dir",
        str(folder),
    )
    info = json.loads((folder / "pool.json").read_text())
    yield folder, info["address"]
    _cli("pool", "stop", "--dir", str(folder), check=False)


def status(folder: Path) -> dict:
    return json.loads(_cli("pool", "status", "--json", "--dir", str(folder)).stdout)


def test_start_status_and_a_second_start_refused(pool) -> None:
    folder, address = pool
    state = status(folder)
    assert (state["capacity"], state["free"], state["resource"], state["workers"]) == (
        4,
        4,
        "SLOT",
        4,
    )
    again = _cli("pool", "start", "--gpus", "none", "--dir", str(folder), check=False)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "a pool already runs at" in again.stderr
    shown = _cli("pool", "status", "--dir", str(folder)).stdout
    assert address in shown and "4 CPU slots" in shown


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a Prometheus endpoint: (name, sorted labels) -> value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_pool_serves_its_series_beside_dasks(pool) -> None:
    """The pool's scheduler serves the pool's series on its ``/metrics``: a study holding 2
    of the 4 slots, as Prometheus would scrape it."""
    from distributed import Client

    from hpsearch.cluster.pool._lease import PoolLease

    folder, address = pool
    url = json.loads((folder / "pool.json").read_text())["metrics"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert f"metrics {url}" in _cli("pool", "status", "--dir", str(folder)).stdout
    with Client(address, timeout=30) as client:
        lease = PoolLease(client, "scraped", weight=2.0, priority="high", max_devices=3)
        try:
            lease.want(3, 1)
            assert lease.acquire("t0", 1) and lease.acquire("t1", 1)
            samples = scrape(url)
        finally:
            lease.close()
    study = (("study", "scraped"),)
    assert samples[("hpsearch_pool_devices", (("kind", "slot"),))] == 4
    assert samples[("hpsearch_pool_devices_free", (("kind", "slot"),))] == 2
    assert samples[("hpsearch_pool_studies", ())] == 1
    for name, value in (
        ("hpsearch_pool_study_devices_held", 2),
        ("hpsearch_pool_study_fair_share", 3),  # what it wants, within its cap: it is alone
        ("hpsearch_pool_study_devices_waiting", 1),
        ("hpsearch_pool_study_weight", 2),
        ("hpsearch_pool_study_max_devices", 3),
        ("hpsearch_pool_study_preemptions_total", 0),
    ):
        assert samples[(name, study)] == value, name
    assert samples[("hpsearch_pool_study_priority", (("priority", "high"), *study))] == 1
    assert samples[("hpsearch_pool_study_device_seconds_total", study)] >= 0
    assert samples[("dask_scheduler_workers", (("state", "idle"),))] == 4  # Dask's own
    after = scrape(url)  # the study left: its series went with it
    assert after[("hpsearch_pool_studies", ())] == 0
    assert not [k for k in after if ("study", "scraped") in k[1]]


def test_a_pool_without_arbiter(tmp_path) -> None:
    """``--no-arbiter``: the same scheduler and workers, no arbiter in the scheduler."""
    from distributed import Client

    from hpsearch.cluster.pool._lease import has_arbiter

    started = _cli(
        "pool",
        "start",
        "--gpus",
        "none",
        "--slots",
        "2",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--no-arbiter",
        "--dir",
        str(tmp_path),
    )
    try:
        info = json.loads((tmp_path / "pool.json").read_text())
        assert info["arbiter"] is False and info["workers"] == 2
        assert f"metrics {info['metrics']}" in started.stdout  # Dask's own series only
        with Client(info["address"], timeout=30) as client:
            assert not has_arbiter(client)
        refused = _cli("pool", "status", "--dir", str(tmp_path), check=False)
        assert refused.returncode == 2 and "runs no arbiter" in refused.stderr
    finally:
        _cli("pool", "stop", "--dir", str(tmp_path), check=False)


def _study_file(folder: Path, name: str, address: str, n_trials: int, **share) -> Path:
    import yaml

    spec = {
        "name": name,
        "objective": {"model": "hpsearch.testing.objectives:pooled"},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "search": {"n_trials": n_trials, "sampler": "random", "seed": 0},
        "cluster": {"address": address},
    }
    if share:
        spec["share"] = share
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(path: Path, run_dir: Path, step_s: float = 0.3) -> subprocess.Popen[str]:
    """``hpsearch run`` of the study file, its trials taking ``step_s`` seconds a step."""
    (run_dir / path.stem).mkdir(parents=True, exist_ok=True)
    (run_dir / path.stem / "step_s").write_text(str(step_s))
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(
        [*HPSEARCH, "run", str(path), "--run-dir", str(run_dir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _set_step(folder: Path, seconds: float) -> None:
    """Set the seconds each step of the study's trials lasts, from now on (see ``pooled``)."""
    (folder / "step_s.new").write_text(str(seconds))
    os.replace(folder / "step_s.new", folder / "step_s")


def _held(state: dict) -> dict[str, float]:
    return {s["name"]: s["held"] for s in state["studies"]}


def _wait_for(
    folder: Path, check, what: str, timeout: float = 120, procs: dict[str, Any] | None = None
) -> dict:
    """The pool's status once ``check`` holds; on a timeout, or once one of the studies'
    ``hpsearch run`` processes ``procs`` has ended before, the failure shows what they said."""
    from distributed import Client

    from hpsearch.cluster.pool._lease import pool_status

    address = json.loads((folder / "pool.json").read_text())["address"]
    deadline = time.monotonic() + timeout
    # Polled through the API that `hpsearch pool status --json` prints (a command each time
    # would start a Python process); the command itself is checked where `status` is called.
    with Client(address, timeout=10) as client:
        while True:
            state = json.loads(json.dumps(pool_status(client)))
            if check(state):
                return state
            ended = [name for name, p in (procs or {}).items() if p.poll() is not None]
            if ended or time.monotonic() >= deadline:
                said = []
                for name, p in (procs or {}).items():
                    if p.poll() is None:
                        p.kill()
                    said.append(f"--- {name} (exit {p.wait(30)}):\n{p.communicate(timeout=30)[0]}")
                why = f"{', '.join(ended)} ended first" if ended else f"{timeout:.0f} s passed"
                raise AssertionError("\n".join([f"{what} ({why}): {state}", *said]))
            time.sleep(0.3)


def _trials(run_dir: Path, name: str):
    import optuna

    from hpsearch.storage import JOURNAL_PREFIX, open_storage

    url = f"{JOURNAL_PREFIX}{run_dir / name / 'optuna.journal'}"
    return optuna.load_study(study_name=name, storage=open_storage(url)).trials


def test_a_high_priority_study_preempts_the_lowest_trials_which_resume_losing_nothing(
    pool, tmp_path
) -> None:
    from mlflow import MlflowClient

    folder, address = pool
    run_dir = tmp_path / "runs"
    # The background's trials hold their step while the urgent study starts, however slowly
    # (a loaded machine), and step on once it is in the pool: they yield at that step's end.
    background = _run(_study_file(tmp_path, "background", address, 4), run_dir, step_s=1)
    try:
        _wait_for(
            folder,
            lambda s: _held(s).get("background") == 4,
            "background borrows all",
            procs={"background": background},
        )
        deadline = time.monotonic() + 120
        while len(list((run_dir / "background").glob("notes-*"))) < 4:  # each a step in
            assert time.monotonic() < deadline, "the background trials' first steps"
            time.sleep(0.2)
        _set_step(run_dir / "background", 600)  # held
        # The study ranks its trials by their reports, and only a checkpointed trial may
        # yield: on a loaded machine a trial's first report can lag its note by seconds.
        checkpoints = run_dir / "background" / "checkpoints"
        while not (
            len(list(checkpoints.glob("trial-[0-9].pt"))) == 4
            and all(1 in t.intermediate_values for t in _trials(run_dir, "background"))
        ):
            assert time.monotonic() < deadline, "the background trials' first reports"
            time.sleep(0.3)
        # Urgent steps of 1 s: it holds 2 devices for 8 s, longer than a status poll takes.
        urgent = _run(
            _study_file(tmp_path, "urgent", address, 3, priority="high", max_devices=2),
            run_dir,
            step_s=1.0,
        )
        try:
            both = {"urgent": urgent, "background": background}
            _wait_for(folder, lambda s: "urgent" in _held(s), "urgent joins the pool", procs=both)
            _set_step(run_dir / "background", 1)  # let go: the lowest yield at this step's end
            state = _wait_for(
                folder, lambda s: _held(s).get("urgent") == 2, "urgent gets its", procs=both
            )
        except BaseException:
            for proc in (urgent, background):
                if proc.poll() is None:
                    proc.kill()
            raise
        _set_step(run_dir / "background", 0.3)
        assert _held(state)["background"] <= 2
        # Each study's Prometheus endpoint says where it stands in the pool.
        import urllib.request

        from hpsearch.metrics._endpoint import wait_for_endpoint

        url = wait_for_endpoint(run_dir / "urgent", timeout=30)
        assert url is not None
        # The share comes with the study's next heartbeat (every second), so a scrape soon
        # after the devices are granted may still show the one before.
        deadline = time.monotonic() + 30
        while True:
            scraped = urllib.request.urlopen(url, timeout=10).read().decode()
            if 'hpsearch_pool_fair_share{study="urgent"} 2.0' in scraped:
                break
            assert time.monotonic() < deadline, scraped
            time.sleep(0.5)
        assert 'hpsearch_pool_devices_held{study="urgent"}' in scraped
        out_urgent, _ = urgent.communicate(timeout=180)
        out_background, _ = background.communicate(timeout=180)
    finally:
        background.kill()
    assert urgent.returncode == 0, out_urgent
    assert background.returncode == 0, out_background
    assert status(folder)["studies"] == []  # both left the pool as they finished

    for name, n in (("background", 4), ("urgent", 3)):
        trials = _trials(run_dir, name)
        assert len(trials) == n and all(t.state.name == "COMPLETE" for t in trials), name
        for t in trials:
            assert sorted(t.intermediate_values) == list(range(1, 9)), (name, t.number)
            assert t.value == t.params["x"]
            notes = (run_dir / name / f"notes-{t.number}-rank0.txt").read_text().split("\n")
            assert sorted(filter(None, notes)) == sorted(f"step {k}" for k in range(1, 9)), (
                "each step trained once"
            )
    preempted = [t for t in _trials(run_dir, "background") if "hpsearch.preempted" in t.user_attrs]
    assert preempted, "the urgent study took devices from the background one"
    kept = [t for t in _trials(run_dir, "background") if t not in preempted]
    assert max(t.params["x"] for t in preempted) < min(t.params["x"] for t in kept), (
        "the trials ranked lowest (maximize: the smallest reports) yielded"
    )
    for t in preempted:
        assert t.user_attrs["hpsearch.preempted"] == "preempted by study urgent (priority high)"
        assert t.user_attrs["hpsearch.preemptions"] >= 1
    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "background"]
    runs = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if "hpsearch.trial_number" in r.data.tags
    ]
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    tagged = {
        int(r.data.tags["hpsearch.trial_number"])
        for r in runs
        if "hpsearch.preempted" in r.data.tags
    }
    assert tagged == {t.number for t in preempted}
    for r in runs:
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "value")]
        assert sorted(steps) == list(range(1, 9)), "each step logged once"


def test_two_studies_share_the_pool_by_weight(pool, tmp_path) -> None:
    folder, address = pool
    run_dir = tmp_path / "runs"
    light = _run(_study_file(tmp_path, "light", address, 6, weight=1), run_dir)
    heavy = _run(_study_file(tmp_path, "heavy", address, 10, weight=3), run_dir)
    try:
        state = _wait_for(
            folder,
            lambda s: _held(s) == {"light": 1, "heavy": 3},
            "shares 1:3 while both want devices",
            procs={"light": light, "heavy": heavy},
        )
        shares = {s["name"]: s["share"] for s in state["studies"]}
        assert shares == {"light": 1.0, "heavy": 3.0}
        for process in (light, heavy):
            out, _ = process.communicate(timeout=180)
            assert process.returncode == 0, out
    finally:
        light.kill()
        heavy.kill()
    assert status(folder)["studies"] == []
    for name, n in (("light", 6), ("heavy", 10)):
        trials = _trials(run_dir, name)
        assert len(trials) == n and all(t.state.name == "COMPLETE" for t in trials)
        assert all(sorted(t.intermediate_values) == list(range(1, 9)) for t in trials)


def _hears_news(client, lease) -> None:
    """Wait until the pool's news reaches ``lease``: its client's subscription goes to the
    scheduler with Dask's next batch of messages, some milliseconds after the join (here the
    requests that follow are quicker than that)."""
    from hpsearch.cluster.pool._extension import NEWS_TOPIC

    deadline = time.monotonic() + 30
    while True:
        client.log_event(NEWS_TOPIC, {"study": lease.study, "why": "free"})
        if lease.wait_for_news(0.2):
            break
        assert time.monotonic() < deadline, f"no news reaches {lease.study}"
    while lease.wait_for_news(0.5):  # a probe sent before, late
        assert time.monotonic() < deadline


def test_the_arbiter_tells_a_coordinator_at_once_not_at_its_next_heartbeat() -> None:
    """A study that must yield hears it as the arbiter decides, and a study that waits hears
    that devices were freed for it: with heartbeats a minute apart, both come within
    seconds (Dask's structured events, on the clients' own connections)."""
    from distributed import Client, LocalCluster

    from hpsearch.cluster.pool._extension import PLUGIN_NAME, PoolArbiter
    from hpsearch.cluster.pool._lease import PoolLease

    slots = {"SLOT": 1}
    with (
        LocalCluster(n_workers=4, threads_per_worker=1, processes=False, resources=slots) as dask,
        Client(dask) as holding_client,
        Client(dask.scheduler_address) as joining_client,
    ):
        holding_client.register_plugin(PoolArbiter(ttl_s=600), name=PLUGIN_NAME)
        holder = PoolLease(holding_client, "holder", heartbeat_s=60)
        newcomer = PoolLease(joining_client, "newcomer", weight=3, heartbeat_s=60)
        try:
            for client, lease in ((holding_client, holder), (joining_client, newcomer)):
                _hears_news(client, lease)
            holder.want(4, 1)
            assert all(holder.acquire(f"h{k}", 1) for k in range(4))  # alone: it borrows all
            began = time.monotonic()
            newcomer.want(3, 1)
            assert not newcomer.acquire("n0", 1)  # the pool asks the holder for 3 back
            assert holder.wait_for_news(30), "the holder hears that it must yield"
            assert holder.asked_total == 3 and "preempted by study newcomer" in holder.reason
            assert time.monotonic() - began < 30  # long before the next heartbeat (60 s)
            assert not newcomer.wait_for_news(0.2)  # nothing is free for it yet
            holder.release("h0")  # a trial that yielded
            assert newcomer.wait_for_news(30), "the newcomer hears that a device is free"
            assert newcomer.acquire("n0", 1)
            assert not holder.wait_for_news(0.2)  # no news for the one that freed it
        finally:
            newcomer.close()
            holder.close()
