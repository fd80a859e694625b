"""What changed between the spec a study ran under and the file run now, and whether the
study's history can carry it.

Every changed field is one :class:`Change` of one of three kinds:

- ``free``: how and where the study runs (budget, timeout, cluster, tracking, concurrency,
  retries, a trial's devices and time limit): it goes on as before;
- ``carried``: what is searched and how (a range, a parameter added or removed, sampler,
  pruner, scheduler and their options, the warm start): it goes on with the earlier trials
  kept; each trial records the spec version it ran under, and the sampler learns only from
  the earlier trials that are valid in the new space;
- ``breaking``: what the values mean (direction, metric, model, data set, fixed
  hyperparameters, constraints; the epochs where a pruner or scheduler compares steps), and
  what Optuna cannot store in the same study (a categorical's choices, a parameter's type or
  log scale): a new study name, or a warm start from this one.

Example:
    >>> old = {"objective": {"direction": "minimize", "epochs": 5}, "search": {"n_trials": 9}}
    >>> new = {"objective": {"direction": "maximize", "epochs": 5}, "search": {"n_trials": 20}}
    >>> [(c.field, c.kind) for c in compare(old, new)]
    [('objective.direction', 'breaking'), ('search.n_trials', 'free')]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Fields (and the sections under them) that change how and where a study runs, not what.
FREE = (
    "search.n_trials",
    "search.timeout",
    "search.max_concurrent",
    "search.max_retries",
    "objective.trial_timeout",
    "objective.checkpoint_interval",
    "objective.gpus_per_trial",
    "objective.parallel",
    "objective.max_memory_per_device",
    "cluster",
    "tracking",
    "storage",
    "share",
)
#: Fields whose change gives the earlier values another meaning.
BREAKING = (
    "objective.direction",
    "objective.directions",
    "objective.metric",
    "objective.metrics",
    "objective.model",
    "objective.dataset",
    "objective.params",
    "objective.constraints",
)


@dataclass(frozen=True)
class Change:
    """One changed field: ``field`` (dotted), its ``old`` and ``new`` values (None: absent),
    its ``kind`` and, for a breaking one, why."""

    field: str
    old: Any
    new: Any
    kind: str  # free | carried | breaking
    why: str = ""

    def line(self, where: str, name: str) -> str:
        """The change in one line; ``where``: the study file, ``name``: the study's name."""
        head = f"{where}: {self.field}: {_show(self.old)} -> {_show(self.new)}"
        if self.kind == "breaking":
            return (
                f"{head}: {self.why}; the study {name!r} cannot carry it: give the study a new "
                f"name, or start a new one from this one (search.warm_start: {{from: {name}}})"
            )
        if self.kind == "carried":
            return f"{head} (carried: the earlier trials are kept)"
        return f"{head} (free)"


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values; a space parameter and a list stay whole."""
    if not isinstance(data, dict) or prefix.startswith("space."):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if path in ("objective.dataset", "objective.params") or path.startswith("search.warm"):
            out[path] = value
        else:
            out.update(_flat(value, path))
    return out


def _under(field: str, prefixes: tuple[str, ...]) -> bool:
    return any(field == p or field.startswith(p + ".") for p in prefixes)


def _space_change(field: str, old: Any, new: Any) -> Change:
    """A searched parameter changed: carried, unless Optuna cannot store both in one study."""
    if old is None or new is None:
        return Change(field, old, new, "carried")
    if old.get("type") != new.get("type"):
        return Change(field, old, new, "breaking", "a parameter's type cannot change in a study")
    if old.get("type") == "categorical" and old.get("choices") != new.get("choices"):
        return Change(
            field,
            old,
            new,
            "breaking",
            "Optuna keeps one list of choices per parameter in a study",
        )
    if bool(old.get("log")) != bool(new.get("log")):
        return Change(field, old, new, "breaking", "a parameter's log scale cannot change")
    return Change(field, old, new, "carried")


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """The changes from ``old`` to ``new`` (both :meth:`StudySpec.to_dict` data), by field."""
    before, after = _flat(old), _flat(new)
    compared_steps = any(
        _steps_compared(spec) for spec in (old, new)
    )  # epochs matter where a pruner or scheduler compares trials at a step
    changes = []
    for field in sorted(set(before) | set(after)):
        a, b = before.get(field), after.get(field)
        if a == b or field == "name":
            continue
        if field.startswith("space."):
            changes.append(_space_change(field, a, b))
        elif field == "objective.epochs":
            kind = "breaking" if compared_steps else "carried"
            changes.append(
                Change(field, a, b, kind, "the pruner or scheduler compares trials at each epoch")
            )
        elif _under(field, BREAKING):
            changes.append(
                Change(field, a, b, "breaking", "the earlier values mean something else")
            )
        elif _under(field, FREE):
            changes.append(Change(field, a, b, "free"))
        else:
            changes.append(Change(field, a, b, "carried"))
    return changes


def _steps_compared(spec: dict[str, Any]) -> bool:
    search = spec.get("search") or {}
    pruner = search.get("pruner", "none")
    name = pruner.get("name") if isinstance(pruner, dict) else pruner
    return search.get("scheduler", "none") != "none" or name not in (None, "none")
