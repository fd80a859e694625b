"""The trace of ``benchmarks/sharing.py`` and what is measured from it: who held which slot
when, the shares per window, Jain's index, utilisation, C's arrival, steps trained twice,
the printed table, the CSV and the plot."""

from __future__ import annotations

import csv
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from _common import table

STUDIES = ("A", "B", "C")
KEY = re.compile(r"^hpsearch-(?P<study>.+)-trial-(?P<number>\d+)-[0-9a-f]{8}$")


@dataclass
class Plan:
    slots: int
    arrival: float
    window: float
    step_s: float
    trials: dict[str, int]
    weights: dict[str, float]
    fair_c: int  # C's cap: half the pool

    def target(self) -> dict[str, float]:
        c = self.fair_c / self.slots
        return {"A": (1 - c) / 2, "B": (1 - c) / 2, "C": c}


@dataclass
class Sample:
    t: float
    running: dict[str, list[int]]  # the trials each study runs now (their numbers)
    queued: dict[str, int]  # trials in Dask waiting for a worker
    arbiter: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> its state


@dataclass
class Side:
    name: str
    arbiter: bool
    samples: list[Sample] = field(default_factory=list)
    launched: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    run_dir: Path = Path()
    asked_back: dict[str, float] = field(default_factory=dict)  # arbiter's preemptions


def _dt(samples: list[Sample], every: float) -> list[float]:
    ts = [s.t for s in samples]
    return [b - a for a, b in itertools.pairwise(ts)] + [every]


def wants_more(s: Sample, name: str) -> bool:
    """Whether a trial of ``name`` waits for a slot it may run on."""
    if s.queued[name] > 0:
        return True
    state = s.arbiter.get(name)
    if state is None:
        return False
    cap = state["max_devices"] if state["max_devices"] is not None else math.inf
    return bool(min(state["demand"], cap) - state["held"] >= 1 - 1e-9)


def started_all(side: Side, plan: Plan) -> dict[str, float]:
    """When each study's last trial started (all its trial numbers seen running)."""
    seen: dict[str, set[int]] = {name: set() for name in STUDIES}
    out: dict[str, float] = {}
    for s in side.samples:
        for name in STUDIES:
            seen[name].update(s.running[name])
            if name not in out and len(seen[name]) >= plan.trials[name]:
                out[name] = s.t
    return out


def contention(side: Side, plan: Plan) -> tuple[float, float] | None:
    """From C's first trial that waits or runs until the first study has started its last
    trial; ``None`` where that is empty."""
    start = next(
        (s.t for s in side.samples if s.running["C"] or s.queued["C"] or "C" in s.arbiter),
        None,
    )
    if start is None:
        return None
    last = [t for t in started_all(side, plan).values() if t > start]
    end_t = min(last, default=side.samples[-1].t)
    return (start, end_t) if end_t > start else None


def windows(span: tuple[float, float], width: float) -> list[tuple[float, float]]:
    start, end_t = span
    n = int((end_t - start) // width)
    if n == 0:
        return [span]
    return [(start + k * width, start + (k + 1) * width) for k in range(n)]


def jain(values: list[float]) -> float:
    square = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * square) if square > 0 else float("nan")


def steps_twice(run_dir: Path) -> tuple[int, int]:
    """Steps noted more than once for one trial, and steps noted, over every study."""
    twice = noted = 0
    for path in run_dir.glob("*/notes-*-rank0.txt"):
        lines = [line for line in path.read_text().splitlines() if line]
        noted += len(lines)
        twice += len(lines) - len(set(lines))
    return twice, noted


def journal(run_dir: Path, name: str) -> tuple[int, int, int]:
    """Trials COMPLETE, trials in the study, and the preemptions its trials went through."""
    from hpsearch.storage import JOURNAL_PREFIX, open_storage

    url = f"{JOURNAL_PREFIX}{run_dir / name / 'optuna.journal'}"
    try:
        trials = optuna.load_study(study_name=name, storage=open_storage(url)).trials
    except Exception:
        return 0, 0, 0
    complete = sum(t.state.name == "COMPLETE" for t in trials)
    preempted = sum(int(t.user_attrs.get("hpsearch.preemptions", 0)) for t in trials)
    return complete, len(trials), preempted


def metrics(side: Side, plan: Plan, every: float) -> dict[str, Any]:
    samples = side.samples
    dts = _dt(samples, every)
    target = plan.target()
    out: dict[str, Any] = {"windows": [], "jain": []}
    span = contention(side, plan)
    out["span"] = span
    if span is not None:
        for lo, hi in windows(span, plan.window):
            held = dict.fromkeys(STUDIES, 0.0)
            for s, dt in zip(samples, dts, strict=True):
                if lo <= s.t < hi:
                    for name in STUDIES:
                        held[name] += len(s.running[name]) * dt
            total = sum(held.values()) or 1.0
            shares = {name: held[name] / total for name in STUDIES}
            out["windows"].append(shares)
            out["jain"].append(jain([shares[n] / target[n] for n in STUDIES]))
        inside = [(s, dt) for s, dt in zip(samples, dts, strict=True) if span[0] <= s.t < span[1]]
        at_fair = sum(dt for s, dt in inside if len(s.running["C"]) >= plan.fair_c)
        out["c_at_fair"] = at_fair / max(1e-9, sum(dt for _, dt in inside))
    waiting = [
        (s, dt)
        for s, dt in zip(samples, dts, strict=True)
        if any(wants_more(s, n) for n in STUDIES)
    ]
    busy = sum(sum(len(v) for v in s.running.values()) * dt for s, dt in waiting)
    out["utilisation"] = busy / max(1e-9, plan.slots * sum(dt for _, dt in waiting))
    arrival = side.launched.get("C", plan.arrival)
    first = next((s.t for s in samples if s.running["C"]), None)
    fair = next((s.t for s in samples if len(s.running["C"]) >= plan.fair_c), None)
    out["c_first"] = None if first is None else first - arrival
    out["c_fair"] = None if fair is None else fair - arrival
    joined = next((s.t for s in samples if s.queued["C"] or "C" in s.arbiter), None)
    out["c_joined"] = None if joined is None else joined - arrival
    out["twice"], out["noted"] = steps_twice(side.run_dir)
    out["wall"] = max(side.ended.values(), default=float("nan"))
    out["ended"] = dict(side.ended)
    out["journal"] = {name: journal(side.run_dir, name) for name in STUDIES}
    out["device_s"] = {
        name: sum(len(s.running[name]) * dt for s, dt in zip(samples, dts, strict=True))
        for name in STUDIES
    }
    return out


# --------------------------------------------------------------------------------- report


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def report(plan: Plan, sides: list[Side], results: list[dict[str, Any]]) -> str:
    target = plan.target()
    rows: list[list[str]] = []

    def row(metric: str, *cells: str) -> None:
        rows.append([metric, *cells])

    row(
        "trials complete A / B / C",
        *(" / ".join(f"{r['journal'][n][0]}/{plan.trials[n]}" for n in STUDIES) for r in results),
    )
    row(
        "contention period (s after A, B start)",
        *("-" if r["span"] is None else f"{r['span'][0]:.0f}-{r['span'][1]:.0f}" for r in results),
    )
    row("target share A / B / C", *(" / ".join(f"{target[n]:.2f}" for n in STUDIES),) * 2)
    for k in range(max(len(r["windows"]) for r in results)):
        cells = []
        for r in results:
            if k < len(r["windows"]):
                shares = r["windows"][k]
                cells.append(" / ".join(f"{shares[n]:.2f}" for n in STUDIES))
            else:
                cells.append("-")
        row(f"window {k + 1}: device-s share A / B / C", *cells)
    row(
        "Jain's index of share/target: mean (min)",
        *(
            f"{sum(r['jain']) / len(r['jain']):.3f} ({min(r['jain']):.3f})" if r["jain"] else "-"
            for r in results
        ),
    )
    row(
        f"C's time at its fair share ({plan.fair_c} slots) in contention",
        *(f"{100 * r['c_at_fair']:.0f} %" if "c_at_fair" in r else "-" for r in results),
    )
    row("utilisation while a trial waits", *(f"{100 * r['utilisation']:.1f} %" for r in results))
    row("C: s from arrival to its first trial waiting", *(_seconds(r["c_joined"]) for r in results))
    row("C: s from arrival to its first trial running", *(_seconds(r["c_first"]) for r in results))
    row(
        f"C: s from arrival to its fair share ({plan.fair_c} slots)",
        *(_seconds(r["c_fair"]) for r in results),
    )
    row("steps trained twice (of steps noted)", *(f"{r['twice']} ({r['noted']})" for r in results))
    row(
        "s until A / B / C finish",
        *(" / ".join(f"{r['ended'].get(n, float('nan')):.0f}" for n in STUDIES) for r in results),
    )
    row("wall s until all three finish", *(f"{r['wall']:.1f}" for r in results))
    row(
        "device-s A / B / C (whole run)",
        *(" / ".join(f"{r['device_s'][n]:.0f}" for n in STUDIES) for r in results),
    )
    row(
        "preemptions: trials yielded A / B / C",
        *(" / ".join(str(r["journal"][n][2]) for n in STUDIES) for r in results),
    )
    row(
        "preemptions: devices asked back A / B / C",
        *(
            " / ".join(f"{s.asked_back.get(n, 0):g}" for n in STUDIES) if s.arbiter else "-"
            for s in sides
        ),
    )
    return table(["metric", *(s.name for s in sides)], rows)


def write_trace(path: Path, sides: list[Side]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(
            ["run", "t", "study", "running", "trials", "queued", "held", "share", "demand"]
        )
        for side in sides:
            for s in side.samples:
                for name in STUDIES:
                    state = s.arbiter.get(name, {})
                    out.writerow(
                        [
                            side.name,
                            f"{s.t:.2f}",
                            name,
                            len(s.running[name]),
                            " ".join(map(str, sorted(s.running[name]))),
                            s.queued[name],
                            state.get("held", ""),
                            "" if "share" not in state else f"{state['share']:.3f}",
                            state.get("demand", ""),
                        ]
                    )


def plot(path: Path, plan: Plan, sides: list[Side]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(len(sides), 1, figsize=(10, 3.2 * len(sides)), sharex=True)
    for ax, side in zip(axes, sides, strict=True):
        ts = [s.t for s in side.samples]
        ax.stackplot(
            ts,
            *([len(s.running[n]) for s in side.samples] for n in STUDIES),
            labels=[f"{n} (weight {plan.weights[n]:g})" for n in STUDIES],
            step="post",
        )
        if "C" in side.launched:
            ax.axvline(side.launched["C"], color="k", linestyle="--", linewidth=1)
        ax.set_ylim(0, plan.slots)
        ax.set_ylabel("slots running")
        ax.set_title(side.name)
        ax.legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("s after A and B start (dashed: C arrives)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------------- main
