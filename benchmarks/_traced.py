"""``hpsearch`` with its Python allocations traced from a moment the caller chooses.

    python benchmarks/_traced.py FOLDER run study.yaml

runs ``hpsearch run study.yaml`` in this process. Once the file ``FOLDER/trace-start``
appears, ``tracemalloc`` starts (one frame: the cheapest), and from then on every half second
``FOLDER/traced.json`` says the bytes allocated since that moment and still alive (the
traced-Python growth), and what the tracer itself holds (it counts in the process's RSS).
Until then nothing is traced: the imports and the start-up run at full speed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

PERIOD_S = 0.5


def _watch(folder: Path) -> None:
    start, out = folder / "trace-start", folder / "traced.json"
    while not start.exists():
        time.sleep(PERIOD_S)
    tracemalloc.start(1)
    while True:
        traced, _ = tracemalloc.get_traced_memory()
        tmp = out.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"traced": traced, "tracer": tracemalloc.get_tracemalloc_memory()})
        )
        os.replace(tmp, out)
        time.sleep(PERIOD_S)


def main() -> None:
    import runpy

    folder = Path(sys.argv[1])
    sys.argv = ["hpsearch", *sys.argv[2:]]
    threading.Thread(target=_watch, args=(folder,), name="traced", daemon=True).start()
    runpy.run_module("hpsearch.cli", run_name="__main__")


if __name__ == "__main__":  # not in the worker processes, which import this file as __mp_main__
    main()
