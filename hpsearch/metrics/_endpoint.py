"""A running study's metrics endpoint (:mod:`hpsearch.metrics`), read back: where it listens
(the study's ``metrics.json``) and its figures (``hpsearch status``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

#: The file in the study's run folder that says where its endpoint listens.
ENDPOINT_FILE = "metrics.json"


def endpoint_url(study_dir: Path) -> str | None:
    """The URL in the study's ``metrics.json``, or None when it has none."""
    try:
        return str(json.loads((Path(study_dir) / ENDPOINT_FILE).read_text())["url"])
    except (OSError, ValueError, KeyError):
        return None


def read_endpoint(study_dir: Path, study: str, *, timeout: float = 3.0) -> dict[str, Any] | None:
    """The figures of a running study from its endpoint, or None when it does not answer.

    Returns ``{"url", "trials": {state: n}, "budget", "queued", "best", "best_trial",
    "sets": {state: n}, "devices": {state: n}, "losses", "retries", "backlog": {where: n},
    "workers", "utilization": [(name or address, device, kind, value)],
    "throughput": {trial: {"samples_per_s", "epoch_s"}}}``.
    """
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    url = endpoint_url(study_dir)
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except (OSError, ValueError):
        return None
    out: dict[str, Any] = {
        "url": url,
        "trials": {},
        "sets": {},
        "devices": {},
        "backlog": {},
        "utilization": [],
        "throughput": {},
    }
    scalars = {
        "hpsearch_trials_budget": "budget",
        "hpsearch_trials_queued": "queued",
        "hpsearch_best_value": "best",
        "hpsearch_best_trial": "best_trial",
        "hpsearch_worker_losses_total": "losses",
        "hpsearch_trial_retries_total": "retries",
        "hpsearch_workers": "workers",
    }
    by_label = {
        "hpsearch_trials": ("trials", "state"),
        "hpsearch_device_sets": ("sets", "state"),
        "hpsearch_devices": ("devices", "state"),
        "hpsearch_tracking_backlog": ("backlog", "where"),
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels, value = sample.labels, sample.value
            if labels.get("study") != study:
                continue
            name = sample.name
            if name in scalars:
                out[scalars[name]] = value
            elif name in by_label:
                key, label = by_label[name]
                out[key][labels[label]] = value
            elif name == "hpsearch_device_utilization":
                who = labels.get("name") or labels.get("worker", "")
                out["utilization"].append((who, labels["device"], labels.get("kind", ""), value))
            elif name in ("hpsearch_trial_samples_per_second", "hpsearch_trial_epoch_seconds"):
                key = "samples_per_s" if name.endswith("second") else "epoch_s"
                out["throughput"].setdefault(int(labels["trial"]), {})[key] = value
    return out


def wait_for_endpoint(study_dir: Path, *, timeout: float) -> str | None:
    """The endpoint's URL once ``metrics.json`` appears (for tests and scripts), or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        url = endpoint_url(study_dir)
        if url is not None:
            return url
        time.sleep(0.2)
    return None
