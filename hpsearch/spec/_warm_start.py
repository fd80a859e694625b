"""``search.warm_start``: earlier studies whose best configurations a new study tries first,
and whose completed trials its sampler learns from (see :mod:`hpsearch.search._carry`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field

from hpsearch.spec._messages import _Bool, _expect_str, _fail, _Int, _show, _Spec


class WarmStartSpec(_Spec):
    """One earlier study to start from."""

    from_: Annotated[str, BeforeValidator(_expect_str)] = Field(
        alias="from",
        description=(
            "The earlier study: its name (a study of this run folder), its run folder "
            "(RUN_DIR/NAME), or an Optuna storage URL (its one study, or the study of this "
            "name in it). Required."
        ),
    )
    top_k: _Int = Field(
        default=10,
        ge=0,
        description=(
            "Its best configurations this study tries first, mapped onto this space "
            "(values outside clipped to the bounds or left to the sampler). Default 10."
        ),
    )
    history: _Bool = Field(
        default=True,
        description=(
            "Its completed trials that are valid in this space inform the sampler (never this "
            "study's best, never in its budget). Default true."
        ),
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _sources(value: Any) -> Any:
    """One source or a list of them; a bare string is ``{from: STRING}``."""
    if value is None:
        return []
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, list):
        raise _fail(
            f"expected {{from: NAME, top_k: 10, history: true}} or a list, got {_show(value)}"
        )
    return [{"from": v} if isinstance(v, str) else v for v in value]


WarmStarts = Annotated[list[WarmStartSpec], BeforeValidator(_sources)]
