"""``share``: a study's claim on a device pool that several studies use at once, and the
renamed ``cluster.scheduler`` key (now ``cluster.address``), and the sizes a study may search."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from hpsearch.exceptions import SpecRenamed
from hpsearch.spec._messages import _choice, _expect_int, _Float, _optional, _Problems, _Spec

#: A study's priority in a shared pool, lowest first: a study of a higher priority takes its
#: fair share first, preempting lower ones (see :mod:`hpsearch.cluster.pool`).
PRIORITIES = ("low", "normal", "high")


class ShareSpec(_Spec):
    """What the study may hold of a shared pool (``hpsearch pool start``) while other studies
    want devices too. Used when the study runs on a pool; a study on a cluster of its own
    holds all of it."""

    weight: _Float = Field(
        default=1.0,
        gt=0,
        description=(
            "The study's share of the pool while others want devices too, against their "
            "weights (weighted max-min fair share): > 0. Default 1."
        ),
    )
    priority: Annotated[str, BeforeValidator(_choice("priority", list(PRIORITIES)))] = Field(
        default="normal",
        description=(
            "low, normal or high: a study takes the devices it wants from studies of a lower "
            "priority, whose trials pause at their next epoch end. Default normal."
        ),
    )
    max_devices: Annotated[int | None, BeforeValidator(_optional(_expect_int))] = Field(
        default=None,
        ge=1,
        description="The most devices the study holds at once. Default null: no cap.",
    )


def _renamed_cluster_keys(raw: Any, problems: _Problems, label: str) -> Any:
    """``cluster.scheduler`` was renamed ``cluster.address`` (two "scheduler" keys, one for the
    Dask scheduler and one for ``search.scheduler``, read alike): the old key still works and
    says so once; both at once is an error."""
    if not isinstance(raw, Mapping) or "scheduler" not in raw:
        return raw
    raw = dict(raw)
    if "address" in raw:
        problems.add(
            "cluster.scheduler", "renamed cluster.address, which is also given; keep only address"
        )
        raw.pop("scheduler")
        return raw
    raw["address"] = raw.pop("scheduler")
    warnings.warn(
        f"{label}: cluster.scheduler is renamed cluster.address (it still works; write "
        "address: to silence this)",
        SpecRenamed,
        stacklevel=2,
    )
    return raw


__all__ = ["PRIORITIES", "ShareSpec"]


def _check_searched_sizes(space: Mapping[str, Any], problems: _Problems) -> None:
    """A searched ``gpus_per_trial`` takes whole devices: trials packed on a device (a fraction
    of one) are a layout of the cluster's workers, fixed for the study."""
    param = space.get("gpus_per_trial")
    if param is None:
        return
    choices = getattr(param, "choices", None)
    whole = (
        all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in choices)
        if choices is not None
        else param.type == "int" and param.low >= 1
    )
    if not whole:
        problems.add(
            "space.gpus_per_trial",
            "a searched size is a whole number of devices (>= 1); trials that share a device "
            "take a fixed fraction of it in objective.gpus_per_trial (1/2, 1/4, 1/8)",
        )
