"""What the plots of a study share: the colours of trial states and the figure they draw on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Trials whose configuration a warm start took from an earlier study.
TRANSFERRED_COLOR = "#9467bd"
STATE_COLORS = {"COMPLETE": "#1f77b4", "PRUNED": "#ff7f0e", "FAIL": "#d62728", "RUNNING": "#7f7f7f"}


def _figure(title: str) -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax
