"""Small trials packed several to a device, on this machine's CPU: the GPU check's packing
rows (``benchmarks/_gpu_packing.py``) on one CPU slot, its twin of a device.

    python benchmarks/packing.py [--epochs 2] [--size 16] [--sizes 1,2,4]

``gpus_per_trial`` 1, 1/2 and 1/4 of one slot that holds every core: 1, 2 or 4 worker
processes share it, each with its share of the threads, and each runs 2 trials of the digits
CNN (batch 256, 32 channels). Per row: the study's wall, trials per slot-hour, the CPU's mean
use (all cores, sampled every 0.5 s) and the median samples/s of one trial. Packing pays
where one trial alone leaves the device idle part of the time (a small model, its data
loading, its per-epoch work); on a device that one trial already fills it costs a little.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Utilisation, table
from _gpu_packing import packing_rows


class CpuUse(Utilisation):
    """The CPU's use (percent of all cores), sampled every 0.5 s while a study runs."""

    def __enter__(self) -> CpuUse:
        import psutil

        psutil.cpu_percent(None)  # the first reading only starts the count
        super().__enter__()
        return self

    def _read(self) -> list[float]:
        import psutil

        return [psutil.cpu_percent(None)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--size", type=int, default=16, help="digits resized to size x size")
    parser.add_argument("--sizes", default="1,2,4", help="trials per slot, one row each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = packing_rows(
            Path(folder),
            epochs=args.epochs,
            cluster={"slots": 1},
            dataset={"name": "digits", "size": args.size},
            sizes=tuple(int(x) for x in args.sizes.split(",")),
            utilisation=CpuUse,
            device="CPU slot",
        )
    print(table(["packing", "throughput", "detail"], rows))


if __name__ == "__main__":
    main()
