"""Shared helpers of the benchmarks: timing and a plain table."""

from __future__ import annotations

import platform
import shutil
import subprocess
import threading
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


class Utilisation:
    """Samples every GPU's utilisation (percent) in a thread while a study runs."""

    def __init__(self) -> None:
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self) -> list[float]:
        try:
            import pynvml

            pynvml.nvmlInit()
            return [
                float(
                    pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(i)).gpu
                )
                for i in range(pynvml.nvmlDeviceGetCount())
            ]
        except Exception:
            exe = shutil.which("nvidia-smi")
            if exe is None:
                return []
            out = subprocess.run(
                [exe, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
            ).stdout
            return [float(x) for x in out.split()]

    def _loop(self) -> None:
        while not self._stop.is_set():
            values = self._read()
            if values:
                self.samples.append(values)
            time.sleep(0.5)

    def __enter__(self) -> Utilisation:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def mean(self) -> float:
        flat = [v for s in self.samples for v in s]
        return sum(flat) / len(flat) if flat else float("nan")
