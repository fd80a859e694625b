"""A running study's metrics for Prometheus, and the same figures read back.

The coordinator side is :class:`StudyMetrics`: ``hpsearch run`` starts one (``cluster.metrics``)
that serves ``GET /metrics`` in Prometheus' text format (``prometheus_client``) and writes where
it listens to ``RUN_DIR/NAME/metrics.json``. Nothing is computed on the trial path: the counts
are read from the coordinator when Prometheus scrapes, two ``on_*`` calls note what only an
event says (an ended trial's throughput, a lost worker), and a thread asks the workers every
few seconds, through ``Client.run``, for what only they know: how busy their devices are, the
throughput of the trials they run, and the MLflow writes they still hold.

The worker side is :func:`trial_figures` (the runner hands its dict to the trial's context,
which fills it as the trial logs ``samples_per_s`` and ``epoch_s``) and :func:`worker_figures`.

:mod:`hpsearch.metrics._endpoint` reads a running study's endpoint back (``hpsearch status``).

Every series carries the label ``study``; docs/metrics.md lists them.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.metrics._endpoint import ENDPOINT_FILE
from hpsearch.trial import RunLayout

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.spec import MetricsSpec
    from hpsearch.trial import TrialOutcome

log = logging.getLogger(__name__)

#: One sample of a series: (name, type, help, labels without ``study``, value).
Sample = tuple[str, str, str, dict[str, str], float]

#: Seconds between two reads of the workers' figures.
POLL_S = 2.0
#: At most this long, the endpoint of a study that ended stays up for Prometheus to scrape the
#: end (1.5 of the scrape intervals seen, at most this).
LAST_SCRAPE_WAIT_S = 30.0
#: What a trial logs that the metrics show per trial (the built-in loop logs both each epoch).
THROUGHPUT_KEYS = ("samples_per_s", "epoch_s")
#: Ended trials whose throughput the endpoint still shows (the latest ones): each is a series
#: of its own (label ``trial``), so keeping every trial's would grow the coordinator and every
#: scrape with the study. Prometheus keeps what it scraped of the others.
ENDED_SHOWN = 256

# ------------------------------------------------------------------------- worker side

# (study, trial number) -> the figures of a trial running in this process.
_live: dict[tuple[str, int], dict[str, float]] = {}
_procs: dict[int, Any] = {}  # pid -> psutil.Process, kept so cpu_percent measures an interval


def trial_figures(study: str, number: int) -> dict[str, float]:
    """The dict in which a trial running in this process keeps its latest throughput."""
    figures: dict[str, float] = {}
    _live[(study, number)] = figures
    return figures


def end_trial(study: str, number: int) -> None:
    _live.pop((study, number), None)


def _cpu_share(threads: int) -> float:
    """This process's and its children's (rank processes') CPU use since the last call, as a
    share of the worker's threads."""
    import psutil

    me = psutil.Process()
    total = 0.0
    seen = set()
    for proc in [me, *me.children(recursive=True)]:
        seen.add(proc.pid)
        kept = _procs.setdefault(proc.pid, proc)
        with contextlib.suppress(psutil.Error):
            total += kept.cpu_percent(None)  # 0.0 at its first call
    for pid in set(_procs) - seen:
        del _procs[pid]
    return total / (100.0 * max(1, threads))


def _gpu_use(ids: tuple[int | str, ...]) -> dict[str, float] | None:
    """NVML's utilisation of each GPU (0-1), or None without nvidia-ml-py or a driver. A MIG
    instance (named by its UUID) is left out: NVML has no utilisation of one instance."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        out = {}
        for i in [d for d in ids if isinstance(d, int)]:
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            out[f"cuda:{i}"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
        return out
    except Exception as exc:
        log.debug("NVML: %s", exc)
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def worker_figures(study: str, dask_worker: Any = None) -> dict[str, Any]:
    """What this worker knows for the study's metrics (run on every worker by ``Client.run``):
    its devices' utilisation, the throughput of the study's trials running in this process and
    the MLflow writes it has not made yet."""
    import sys

    from hpsearch.cluster import WorkerDevices

    devices = WorkerDevices.from_env()
    label = devices.label(devices.ids)
    use = _gpu_use(devices.ids) if devices.kind == "cuda" else None
    if use is None:  # CPU slots (or GPUs without NVML): the worker's share of its cores
        use = {label: _cpu_share(devices.threads)}
        kind = "cpu"
    else:
        kind = "gpu"
    writer = sys.modules.get("hpsearch.tracking._writer")
    return {
        "name": str(getattr(dask_worker, "name", "") or ""),
        "kind": kind,
        "utilization": use,
        "trials": {n: dict(f) for (s, n), f in list(_live.items()) if s == study and f},
        "tracking_pending": writer.writer.pending() if writer is not None else 0,
    }


# ------------------------------------------------------------------------- coordinator side


class NoMetrics:
    """What the coordinator calls when the study has no metrics endpoint: nothing."""

    def on_outcome(self, outcome: TrialOutcome) -> None:
        pass

    def on_worker_lost(self, *, retried: bool) -> None:
        pass


NO_METRICS = NoMetrics()


class StudyMetrics(NoMetrics):
    """A study's Prometheus endpoint: start it, :meth:`watch` the coordinator, :meth:`close`.

    Args:
        study: the study's name (the ``study`` label of every series).
        spec: ``cluster.metrics``.
        study_dir: the study's run folder (``metrics.json`` goes there; its tracking backlog
            is counted).
        client: the Dask client whose workers are asked for their figures.
    """

    def __init__(self, study: str, spec: MetricsSpec, *, study_dir: Path, client: Client) -> None:
        self.study = study
        self.spec = spec
        self.study_dir = Path(study_dir)
        self.client = client
        self._watched: Callable[[], Iterable[Sample]] | None = None
        self._running: Callable[[], set[int]] = set
        self.losses = 0
        self.retries = 0
        # trial number -> its last throughput, for the latest ENDED_SHOWN ended trials
        # (a plain dict, in the order they ended: the scrape's thread copies it at once)
        self._ended: dict[int, dict[str, float]] = {}
        self._workers: dict[str, dict[str, Any]] = {}  # address -> its latest figures
        self._disk_backlog = 0
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._server: Any = None
        self.url = ""
        # Scrapes seen (their count, the times of the latest) and the count when the study ended.
        self._scraped = threading.Condition()
        self._scrapes = 0
        self._scrape_times: collections.deque[float] = collections.deque(maxlen=3)
        self._end: tuple[int, float] | None = None

    # ------------------------------------------------------------ life

    def start(self) -> StudyMetrics:
        """Listen on ``host:port`` (port 0: a free one), write ``metrics.json``, start polling."""
        from prometheus_client import CollectorRegistry

        from hpsearch.exceptions import ClusterError
        from hpsearch.metrics._http import serve

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        try:
            self._server = serve(registry, self.spec.host, self.spec.port, self.on_scrape)
        except OSError as exc:
            raise ClusterError(
                f"cluster.metrics: cannot listen on {self.spec.host}:{self.spec.port} "
                f"({exc.strerror or exc}); choose another port, or port: 0 for a free one"
            ) from None
        port = int(self._server.server_port)
        host = "127.0.0.1" if self.spec.host in ("0.0.0.0", "", "::") else self.spec.host
        self.url = f"http://{host}:{port}/metrics"
        self.study_dir.mkdir(parents=True, exist_ok=True)
        path = self.study_dir / ENDPOINT_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": self.url, "port": port, "pid": os.getpid()}))
        os.replace(tmp, path)
        self._poller = threading.Thread(target=self._poll, name="hpsearch-metrics", daemon=True)
        self._poller.start()
        return self

    def watch(
        self, figures: Callable[[], Iterable[Sample]], *, running: Callable[[], set[int]]
    ) -> None:
        """From now on, add the samples ``figures()`` gives to each scrape (the coordinator's
        counts, devices and pool share: :meth:`hpsearch.coordinator.Coordinator.figures`), and
        show the throughput of the trials ``running()`` names."""
        self._watched = figures
        self._running = running

    def stop_polling(self, *, ended: bool = False) -> None:
        """Stop asking the workers (before the cluster closes); the endpoint stays up.
        ``ended``: the study ran to its end, and :meth:`close` lets Prometheus scrape it."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=30)
        if ended:
            with self._scraped:
                self._end = (self._scrapes, time.monotonic())

    def on_scrape(self) -> None:
        """Prometheus is about to read the figures (called by the server)."""
        with self._scraped:
            self._scrape_times.append(time.monotonic())
            self._scrapes += 1
            self._scraped.notify_all()

    def scrape_interval(self) -> float | None:
        """How often Prometheus scrapes the endpoint, if it did lately, or None."""
        with self._scraped:
            times = list(self._scrape_times)
        if len(times) < 2:
            return None
        interval = (times[-1] - times[0]) / (len(times) - 1)
        since = (self._end[1] if self._end else time.monotonic()) - times[-1]
        return interval if since <= 2 * interval else None

    def _await_last_scrape(self) -> None:
        """Once a study ended, wait until a scrape has read its end: Prometheus keeps the last
        samples it scraped, and without that one the study would stay running there. At most
        1.5 scrape intervals since it ended; nothing when Prometheus does not scrape it."""
        interval = self.scrape_interval()
        with self._scraped:
            if self._end is None or interval is None:
                return
            count, at = self._end
            limit = min(1.5 * interval + 0.5, LAST_SCRAPE_WAIT_S)
            left = at + limit - time.monotonic()
            if left > 3:
                log.warning("metrics: the endpoint stays up until Prometheus scrapes the end")
            if not self._scraped.wait_for(lambda: self._scrapes > count, max(left, 0)):
                return
        time.sleep(0.2)  # the scrape's answer is written after the figures are read

    def close(self) -> None:
        self.stop_polling()
        self._await_last_scrape()
        with contextlib.suppress(FileNotFoundError):
            (self.study_dir / ENDPOINT_FILE).unlink()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> StudyMetrics:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ events (the trial path)

    def on_outcome(self, outcome: TrialOutcome) -> None:
        figures = {k: float(outcome.extra[k]) for k in THROUGHPUT_KEYS if k in outcome.extra}
        if figures:
            self._ended.pop(outcome.trial_number, None)
            self._ended[outcome.trial_number] = figures
            while len(self._ended) > ENDED_SHOWN:
                del self._ended[next(iter(self._ended))]

    def on_worker_lost(self, *, retried: bool) -> None:
        self.losses += 1
        self.retries += int(retried)

    # ------------------------------------------------------------ the workers

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(POLL_S)

    def poll_once(self) -> None:
        try:
            answers = self.client.run(worker_figures, self.study, on_error="return")
        except Exception as exc:  # the scheduler is restarting or gone: keep what we know
            log.debug("worker figures not read: %s", exc)
            answers = None
        if answers is not None:
            self._workers = {a: r for a, r in answers.items() if isinstance(r, dict)}
        folder = RunLayout.of_study_dir(self.study_dir).tracking_backlog
        try:
            self._disk_backlog = sum(1 for _ in folder.glob("*.json"))
        except OSError:
            self._disk_backlog = 0

    # ------------------------------------------------------------ the scrape

    def figures(self) -> Iterator[Sample]:
        """Every sample: (name, type, help, labels without ``study``, value)."""
        if self._watched is not None:
            yield from self._watched()
        yield "hpsearch_worker_losses_total", "counter", HELP["losses"], {}, self.losses
        yield "hpsearch_trial_retries_total", "counter", HELP["retries"], {}, self.retries
        workers = dict(self._workers)
        pending = sum(int(w.get("tracking_pending", 0)) for w in workers.values())
        yield "hpsearch_tracking_backlog", "gauge", HELP["backlog"], {"where": "workers"}, pending
        yield (
            "hpsearch_tracking_backlog",
            "gauge",
            HELP["backlog"],
            {"where": "disk"},
            self._disk_backlog,
        )
        yield "hpsearch_workers", "gauge", HELP["workers"], {}, len(workers)
        for address, w in sorted(workers.items()):
            for device, value in sorted(w.get("utilization", {}).items()):
                labels = {
                    "worker": address,
                    "name": w.get("name", ""),
                    "device": device,
                    "kind": w.get("kind", ""),
                }
                yield "hpsearch_device_utilization", "gauge", HELP["util"], labels, value
        trials = dict(self._ended)
        running = self._running()
        for w in workers.values():
            for number, figures in w.get("trials", {}).items():
                if int(number) in running:
                    trials[int(number)] = figures
        for number, figures in sorted(trials.items()):
            labels = {"trial": str(number)}
            if "samples_per_s" in figures:
                yield (
                    "hpsearch_trial_samples_per_second",
                    "gauge",
                    HELP["sps"],
                    labels,
                    figures["samples_per_s"],
                )
            if "epoch_s" in figures:
                yield (
                    "hpsearch_trial_epoch_seconds",
                    "gauge",
                    HELP["epoch"],
                    labels,
                    figures["epoch_s"],
                )


#: The help text of every series, by its short name.
HELP = {
    "trials": "Trials of the study by state (complete, pruned, failed, running).",
    "budget": "The study's trial budget (search.n_trials).",
    "queued": "Trials in the study waiting for a free device set.",
    "best": "The best objective value so far.",
    "best_trial": "The number of the best trial so far.",
    "sets": "Device sets (trial slots) busy with a trial, and idle.",
    "devices": "Devices (GPUs or CPU slots) busy with a trial, and idle.",
    "losses": "Workers lost while they ran one of the study's trials.",
    "retries": "Trials run again after their worker was lost.",
    "backlog": "MLflow writes not made yet: held by workers, and kept on disk for a later run.",
    "workers": "Workers that answered the latest read.",
    "util": "Utilisation of a worker's devices, 0-1 (NVML on GPUs; the CPU share on slots).",
    "sps": "Training samples per second of the trial's latest epoch.",
    "epoch": "Seconds of the trial's latest epoch (train and evaluate).",
    "asha_bracket": "asha brackets auto: the bracket new trials start in (the last: no pause).",
    "asha_first_epoch": "asha brackets auto: the epoch new trials pause at first.",
    "asha_evidence": "asha brackets auto: trials trained without pausing the estimate counts.",
    "asha_decisions": "asha brackets auto: decisions that changed where new trials start.",
    "asha_survival": "asha brackets auto: of the best at the last epoch, the share a rung keeps.",
    "asha_finished": "asha brackets auto: trials of a bracket that reached the last epoch.",
    "asha_finished_top": "asha brackets auto: of those, how many are in the study's top 1/eta**2.",
    "asha_passed_over": "asha brackets auto: 1 where a bracket's measured yield fell behind.",
}

#: Every series of a study's endpoint: name, type, labels beside ``study``, and its help (a
#: key of :data:`HELP`). The documentation's reference is generated from this table.
SERIES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("hpsearch_trials", "gauge", ("state",), "trials"),
    ("hpsearch_trials_budget", "gauge", (), "budget"),
    ("hpsearch_trials_queued", "gauge", (), "queued"),
    ("hpsearch_device_sets", "gauge", ("state",), "sets"),
    ("hpsearch_devices", "gauge", ("state", "kind"), "devices"),
    ("hpsearch_device_utilization", "gauge", ("worker", "name", "device", "kind"), "util"),
    ("hpsearch_trial_samples_per_second", "gauge", ("trial",), "sps"),
    ("hpsearch_trial_epoch_seconds", "gauge", ("trial",), "epoch"),
    ("hpsearch_worker_losses_total", "counter", (), "losses"),
    ("hpsearch_trial_retries_total", "counter", (), "retries"),
    ("hpsearch_tracking_backlog", "gauge", ("where",), "backlog"),
    ("hpsearch_workers", "gauge", (), "workers"),
    ("hpsearch_best_value", "gauge", (), "best"),
    ("hpsearch_best_trial", "gauge", (), "best_trial"),
)


class _Collector:
    """Builds the metric families from :meth:`StudyMetrics.figures` at each scrape."""

    def __init__(self, metrics: StudyMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families: dict[str, Any] = {}
        for name, kind, help_text, labels, value in self.metrics.figures():
            keys = ["study", *labels]
            family = families.get(name)
            if family is None:
                if kind == "counter":
                    family = CounterMetricFamily(name[: -len("_total")], help_text, labels=keys)
                else:
                    family = GaugeMetricFamily(name, help_text, labels=keys)
                families[name] = family
            family.add_metric([self.metrics.study, *labels.values()], float(value))
        yield from families.values()
