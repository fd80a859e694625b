"""Tiny objectives for tests and benchmarks (no training)."""

from __future__ import annotations

import os
import time

import optuna


def trivial(trial: optuna.Trial) -> float:
    """A few suggests, no report: measures the orchestration's own cost."""
    x = trial.suggest_float("x", -10.0, 10.0)
    y = trial.suggest_float("y", -10.0, 10.0)
    return (x - 2.0) ** 2 + (y + 1.0) ** 2


def staircase(trial: optuna.Trial) -> float:
    """Reports ``x`` at each of 4 steps (minimize): trials above the median get pruned."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(4):
        trial.report(x + 0.01 * step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x


def with_context(trial: optuna.Trial, ctx: object) -> float:
    """Takes the optional context; records the process it ran in."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("devices", list(getattr(ctx, "devices", [])))
    return x


def dynamic(trial: optuna.Trial) -> float:
    """Defines its own space (no ``space`` in the spec): a conditional parameter."""
    kind = trial.suggest_categorical("kind", ["a", "b"])
    x = trial.suggest_float(f"x_{kind}", 0.0, 1.0)
    return x if kind == "a" else x + 0.5


def raises(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    if trial.number % 2 == 1:
        raise ValueError(f"odd trial {trial.number} refuses x={x:.3f}")
    return x


def returns_nan(trial: optuna.Trial) -> float:
    trial.suggest_float("x", 0.0, 1.0)
    return float("nan")


def reports_nan(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.report(x, 0)
    trial.report(float("nan"), 1)
    return x


def sleepy(trial: optuna.Trial) -> float:
    """Reports once a second for 60 steps: long enough to be killed or interrupted."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(60):
        trial.report(x, step)
        time.sleep(1.0)
    return x
