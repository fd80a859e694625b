"""Shared helpers of the benchmarks: timing and a plain table."""

from __future__ import annotations

import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


@contextmanager
def timer() -> Iterator[list[float]]:
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [
        [f"{c:.4g}" if isinstance(c, float) else str(c) for c in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def machine() -> str:
    import os

    cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
