"""The study's metrics endpoint: its spec key, and a real Prometheus server scraping a running
study, its series checked through Prometheus' own HTTP API."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from hpsearch.exceptions import ClusterError, SpecError
from hpsearch.spec import MetricsSpec, StudySpec
from hpsearch.testing._specs import user_spec
from tests.conftest import free_port

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_metrics_are_on_by_default_and_null_turns_them_off():
    spec = StudySpec.from_dict(user_spec("m", "hpsearch.testing.objectives:trivial"))
    assert spec.cluster.metrics == MetricsSpec(port=0, host="127.0.0.1")
    assert "metrics" not in spec.to_dict()["cluster"]  # the default leaves the spec_hash as it was
    off = user_spec("m", "hpsearch.testing.objectives:trivial")
    off["cluster"]["metrics"] = None
    spec_off = StudySpec.from_dict(off)
    assert spec_off.cluster.metrics is None
    assert StudySpec.from_dict(spec_off.to_dict()).cluster.metrics is None
    assert spec_off.spec_hash != spec.spec_hash


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"port": 70000}, ["cluster.metrics.port", "65535"]),
        ({"port": "x"}, ["cluster.metrics.port", "'x'"]),
        ({"hots": "0.0.0.0"}, ["cluster.metrics.hots", "host"]),
    ],
)
def test_a_bad_metrics_key_is_one_line_naming_it(value, words):
    data = user_spec("m", "hpsearch.testing.objectives:trivial")
    data["cluster"]["metrics"] = value
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(data)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    for word in words:
        assert word in message, message


def test_a_port_in_use_is_one_line_naming_the_key(tmp_path):
    from hpsearch.metrics import StudyMetrics

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = StudyMetrics("m", MetricsSpec(port=port), study_dir=tmp_path, client=None)  # type: ignore[arg-type]
        with pytest.raises(ClusterError) as info:
            metrics.start()
    assert str(info.value).startswith(f"cluster.metrics: cannot listen on 127.0.0.1:{port}")
    assert not (tmp_path / "metrics.json").exists()


def _scrape_later(url: str, delay: float) -> dict[str, object]:
    """Scrape ``url`` as Prometheus does after ``delay`` seconds, on a thread; the answer, or
    the error."""
    got: dict[str, object] = {}

    def scrape() -> None:
        time.sleep(delay)
        request = urllib.request.Request(url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                got["text"] = response.read().decode()
        except OSError as exc:
            got["error"] = exc

    got["thread"] = thread = threading.Thread(target=scrape)
    thread.start()
    return got


def test_an_ended_study_keeps_its_endpoint_up_until_a_scrape_reads_the_end(tmp_path):
    from hpsearch.metrics import StudyMetrics

    def endpoint(*ago: float) -> StudyMetrics:
        """An endpoint scraped ``ago`` seconds before now (white-box: the times it saw)."""
        metrics = StudyMetrics("m", MetricsSpec(port=0), study_dir=tmp_path, client=None)  # type: ignore[arg-type]
        metrics.start()
        now = time.monotonic()
        metrics._scrape_times.extend(now - a for a in ago)
        return metrics

    def closed_before_a_scrape(metrics: StudyMetrics) -> bool:
        got = _scrape_later(metrics.url, 1.0)  # close() is called at once: long before
        metrics.close()
        got["thread"].join()  # type: ignore[attr-defined]
        if "text" in got:
            assert "hpsearch_workers" in str(got["text"])
        assert not (tmp_path / "metrics.json").exists()
        return isinstance(got.get("error"), OSError)

    # Scraped every 20 s, as Prometheus does, and the study ran to its end: close() waits
    # (at most 30 s) for the next scrape, which reads the end.
    metrics = endpoint(40, 20, 0)
    assert metrics.scrape_interval() == pytest.approx(20, abs=0.5)
    metrics.stop_polling(ended=True)
    assert not closed_before_a_scrape(metrics)
    # Interrupted (or failed): the endpoint goes at once.
    assert closed_before_a_scrape(endpoint(40, 20, 0))
    # No longer scraped (not for 60 s, every 15 s before): nothing to wait for.
    metrics = endpoint(90, 75, 60)
    assert metrics.scrape_interval() is None
    metrics.stop_polling(ended=True)
    assert closed_before_a_scrape(metrics)
    # Read by a person (hpsearch status, a browser), not by Prometheus: not a scrape.
    metrics = endpoint()
    for _ in range(3):
        urllib.request.urlopen(metrics.url, timeout=10).read()
    assert metrics.scrape_interval() is None
    metrics.stop_polling(ended=True)
    assert closed_before_a_scrape(metrics)


@pytest.mark.slow
def test_a_free_port_is_written_to_the_run_folder_and_serves_the_study(run_dir, dask_client):
    """Port 0: the endpoint's address is in metrics.json while the study runs; read back there
    by what ``hpsearch status`` uses, it has the coordinator's counts and the workers' figures;
    the file is gone when the run ends."""
    from hpsearch.metrics._endpoint import read_endpoint
    from hpsearch.study import Study

    spec = user_spec("free-port", "hpsearch.testing.objectives:steady", n_trials=3)
    study = Study(spec, run_dir=run_dir, client=dask_client)
    seen: list[dict] = []

    def look(progress) -> None:  # type: ignore[no-untyped-def]
        if progress.running and not seen:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the workers' figures come with their first read
                figures = read_endpoint(study.layout.study_dir, "free-port")
                assert figures is not None
                if figures["utilization"]:
                    seen.append(figures)
                    return
                time.sleep(0.2)

    result = study.run(on_progress=look)
    assert result.progress.ended == 3
    assert seen, "the endpoint was never read while trials ran"
    live = seen[0]
    assert re.fullmatch(r"http://127\.0\.0\.1:[1-9]\d*/metrics", live["url"]), live["url"]
    assert live["trials"]["running"] == 2 and live["budget"] == 3
    assert live["sets"] == {"busy": 2.0, "idle": 0.0}
    assert live["losses"] == 0 and live["retries"] == 0
    assert live["workers"] == 2 and len(live["utilization"]) == 2
    assert set(live["backlog"]) == {"workers", "disk"}
    assert not (study.layout.study_dir / "metrics.json").exists()
    assert read_endpoint(study.layout.study_dir, "free-port") is None


@pytest.mark.slow
def test_a_lost_worker_is_counted_with_its_retry(run_dir, dask_client):
    """A worker SIGKILLed mid-trial: the endpoint counts one lost worker and one retry."""
    from hpsearch.metrics._endpoint import read_endpoint
    from hpsearch.study import Study

    spec = user_spec("lost-worker", "hpsearch.testing.objectives:steady", n_trials=3)
    study = Study(spec, run_dir=run_dir, client=dask_client)
    state: dict = {"killed": False, "after": None}

    def look(progress) -> None:  # type: ignore[no-untyped-def]
        if progress.running and not state["killed"]:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                busy = [w for w, keys in dask_client.processing().items() if keys]
                if busy:
                    pid = dask_client.run(os.getpid, workers=busy[:1])[busy[0]]
                    os.kill(pid, signal.SIGKILL)
                    state["killed"] = True
                    return
                time.sleep(0.1)
        elif state["killed"] and state["after"] is None:
            figures = read_endpoint(study.layout.study_dir, "lost-worker")
            if figures is not None and figures["losses"]:
                state["after"] = figures

    result = study.run(on_progress=look)
    dask_client.wait_for_workers(2, timeout=60)  # the Nanny restarted it, for the next tests
    assert state["killed"] and state["after"] is not None
    assert state["after"]["losses"] == 1 and state["after"]["retries"] == 1
    assert result.progress.ended == 3 and result.progress.failed == 0


# ---------------------------------------------------------------------------- Prometheus

STUDY = """\
name: scraped
objective:
  model: hpsearch.testing.objectives:held_training
  metric: loss
  direction: minimize
  epochs: 3
space: {}
search:
  n_trials: 4
  sampler: random
  pruner: median
  seed: 0
cluster:
  n_workers: 2
  metrics: {port: PORT}
"""


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


class _Prometheus:
    """Queries of a Prometheus server's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        args = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        body = _get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode(args))
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def values(self, expr: str, label: str | None = None) -> dict[str, float]:
        return {
            (r["metric"].get(label, "") if label else ""): float(r["value"][1])
            for r in self.query(expr)
        }

    def wait(self, expr: str, ok, *, timeout: float = 240.0) -> list[dict]:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if ok(result):
                return result
            time.sleep(0.5)
        raise AssertionError(f"{expr}: still {result} after {timeout:.0f} s")


def _start_prometheus(tmp_path: Path, target_port: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: hpsearch\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if b"Ready" in _get(f"{url}/-/ready", timeout=2):
                return proc, url
        except OSError:
            pass
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
        time.sleep(0.3)
    raise AssertionError("Prometheus did not get ready")


def _hpsearch(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="the prometheus binary is missing (Debian: apt-get install prometheus; .ci/run does)",
)
def test_prometheus_scrapes_a_running_study(tmp_path):
    target = free_port()
    prometheus, prom_url = _start_prometheus(tmp_path, target)
    prom = _Prometheus(prom_url)
    sel = 'study="scraped"'
    study_dir = tmp_path / "runs" / "scraped"
    study_dir.mkdir(parents=True)
    hold = study_dir / "hold"
    hold.touch()  # both first trials wait after their first epoch until the test lets go
    (tmp_path / "study.yaml").write_text(STUDY.replace("PORT", str(target)))
    run = _hpsearch("run", "study.yaml", cwd=tmp_path)
    try:
        # Live: two trials running (two workers), their throughput read from the workers.
        prom.wait(
            f'hpsearch_trials{{{sel},state="running"}}',
            lambda r: r and float(r[0]["value"][1]) == 2,
        )
        live = prom.wait(f"hpsearch_trial_samples_per_second{{{sel}}}", lambda r: len(r) == 2)
        assert all(float(r["value"][1]) > 0 for r in live)
        assert len(prom.query(f"hpsearch_trial_epoch_seconds{{{sel}}}")) == 2
        sets = prom.values(f"hpsearch_device_sets{{{sel}}}", "state")
        assert sets == {"busy": 2.0, "idle": 0.0}
        devices = prom.values(f'hpsearch_devices{{{sel},kind="slot"}}', "state")
        assert devices == {"busy": 2.0, "idle": 0.0}
        use = prom.wait(f"hpsearch_device_utilization{{{sel}}}", lambda r: len(r) == 2)
        assert {r["metric"]["kind"] for r in use} == {"cpu"}
        assert all(float(r["value"][1]) >= 0.0 for r in use)
        assert prom.values(f"hpsearch_trials_queued{{{sel}}}") == {"": 0.0}
        assert prom.values(f"hpsearch_trials_budget{{{sel}}}") == {"": 4.0}

        # Every series is in docs/metrics.md, and every query of the Grafana dashboard runs
        # and finds series.
        names = {r["metric"]["__name__"] for r in prom.query(f'{{__name__=~"hpsearch_.+",{sel}}}')}
        documented = set(
            re.findall(r"^\| `(hpsearch_\w+)`", (DOCS / "metrics.md").read_text(), re.M)
        )
        pool = {n for n in documented if n.startswith("hpsearch_pool_")}  # tests/test_pool.py
        assert names <= documented and documented - names - pool <= {
            "hpsearch_best_value",
            "hpsearch_best_trial",
        }
        dashboard = json.loads((DOCS / "grafana-hpsearch.json").read_text())
        exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
        assert set(re.findall(r"hpsearch_\w+", " ".join(exprs))) <= documented

        # hpsearch status reads the same figures from the running study's endpoint.
        status = _hpsearch("status", str(study_dir), cwd=tmp_path)
        out, _ = status.communicate(timeout=120)
        assert status.returncode == 0, out
        assert f"live from http://127.0.0.1:{target}/metrics" in out, out
        assert "2 running" in out and "device sets 2 busy, 0 idle" in out, out
        assert "utilisation: " in out, out

        hold.unlink()
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, out
        assert f"metrics http://127.0.0.1:{target}/metrics" in out, out
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(30)

    try:
        # The whole study, as Prometheus kept it (the endpoint is gone: the last samples).
        def last(expr: str, label: str | None = None) -> dict[str, float]:
            return prom.values(f"last_over_time({expr}[10m])", label)

        ended = last(f"hpsearch_trials{{{sel}}}", "state")
        assert ended["running"] == 0.0
        assert ended["complete"] + ended["pruned"] + ended["failed"] == 4.0, ended
        assert ended["complete"] >= 1 and ended["failed"] == 0.0, ended
        assert len(last(f"hpsearch_trial_samples_per_second{{{sel}}}", "trial")) == 4
        assert len(last(f"hpsearch_trial_epoch_seconds{{{sel}}}", "trial")) == 4
        assert last(f"hpsearch_worker_losses_total{{{sel}}}") == {"": 0.0}
        assert last(f"hpsearch_trial_retries_total{{{sel}}}") == {"": 0.0}
        assert set(last(f"hpsearch_tracking_backlog{{{sel}}}", "where")) == {"workers", "disk"}
        assert last(f"hpsearch_workers{{{sel}}}") == {"": 2.0}
        best = last(f"hpsearch_best_value{{{sel}}}")[""]

        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        study = optuna.load_study(
            study_name="scraped",
            storage=JournalStorage(JournalFileBackend(str(study_dir / "optuna.journal"))),
        )
        assert best == pytest.approx(study.best_value)
        # The run ended: its endpoint went away, as Prometheus sees at its next scrape (a
        # second, or more on a loaded machine).
        prom.wait('up{job="hpsearch"}', lambda r: r and float(r[0]["value"][1]) == 0.0)
        assert prom.values('max_over_time(up{job="hpsearch"}[10m])') == {"": 1.0}
        assert not (study_dir / "metrics.json").exists()

        # Every query of the dashboard, at the last scrape of the study, finds series.
        window = {"start": time.time() - 600, "end": time.time(), "step": "1s"}
        window["query"] = f"hpsearch_trials_budget{{{sel}}}"
        body = _get(f"{prom.url}/api/v1/query_range?" + urllib.parse.urlencode(window))
        at = float(json.loads(body)["data"]["result"][0]["values"][-1][0])
        for expr in exprs:
            if "hpsearch_pool_" in expr:
                continue  # a study outside a pool has no pool series (tests/test_pool.py)
            assert prom.query(expr.replace("$study", "scraped"), at=at), expr

        status = _hpsearch("status", str(study_dir), cwd=tmp_path)
        out, _ = status.communicate(timeout=120)
        assert status.returncode == 0 and "live from" not in out and "4/4 ended" in out, out
        plot = os.environ.get("HPSEARCH_METRICS_PLOT")
        if plot:
            _plot(prom, Path(plot))
    finally:
        os.killpg(prometheus.pid, signal.SIGTERM)
        prometheus.wait(30)


def _plot(prom: _Prometheus, path: Path) -> None:
    """Draw the study's series as Prometheus kept them (for the docs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = time.time()
    panels = [
        ('hpsearch_trials{study="scraped"}', "trials by state", "state"),
        ('hpsearch_device_sets{study="scraped"}', "device sets", "state"),
        ('hpsearch_device_utilization{study="scraped"}', "utilisation (CPU share)", "name"),
        ('hpsearch_trial_samples_per_second{study="scraped"}', "samples/s per trial", "trial"),
        ('hpsearch_trial_epoch_seconds{study="scraped"}', "epoch seconds per trial", "trial"),
        ('hpsearch_best_value{study="scraped"}', "best value so far", None),
    ]
    fig, axes = plt.subplots(3, 2, figsize=(11, 9), sharex=True)
    results = []
    for expr, _, _ in panels:
        query = {"query": expr, "start": end - 600, "end": end, "step": "1s"}
        body = _get(f"{prom.url}/api/v1/query_range?" + urllib.parse.urlencode(query))
        results.append(json.loads(body)["data"]["result"])
    t0 = min((float(r["values"][0][0]) for result in results for r in result), default=end)
    for ax, (_, title, label), result in zip(axes.flat, panels, results, strict=True):
        for r in result:
            xs = [float(t) - t0 for t, _ in r["values"]]
            ys = [float(v) for _, v in r["values"]]
            ax.plot(xs, ys, label=r["metric"].get(label, "") if label else None)
        ax.set_title(title)
        ax.set_xlabel("seconds since the first scrape")
        if label:
            ax.legend(fontsize=7)
    fig.suptitle("hpsearch metrics of a 4-trial study, scraped by Prometheus every second")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
