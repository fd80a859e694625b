"""The LCBench benchmark of hpsearch.simulation: its speed, its equality with yahpo-gym, and
the reference best values it ships.

    python benchmarks/lcbench.py speed [--curves 2000] [--epochs 52]
    python benchmarks/lcbench.py check [--configs 50] [--instances 3945,7593,189909]
                                       [--golden tests/data/lcbench_yahpo.json]
    python benchmarks/lcbench.py reference-best [--n 50000] [--seed 0]

``speed`` times ``LCBench.curve`` on distinct random configurations (no cache hits), then
the same curves again (all cache hits). ``check`` compares every epoch's six outputs with
``yahpo_gym.BenchmarkSet("lcbench", instance=...).objective_function``, on the default
configuration, the space's two corners and random configurations; ``--golden`` also writes
yahpo-gym's values of the first six of them on each instance, which the tests compare with
when yahpo-gym is not installed. yahpo-gym 1.0.2 needs numpy < 2 (its ConfigSpace 0.6.1 is
built against numpy 1), so ``check`` runs in a separate environment::

    python3.11 -m venv /tmp/yahpo && /tmp/yahpo/bin/pip install yahpo-gym==1.0.2
    PYTHONPATH=. /tmp/yahpo/bin/python benchmarks/lcbench.py check

``reference-best`` writes ``hpsearch/data/surrogates/lcbench/reference_best.json``: each
metric's best value at epoch 52 on each instance, over ``--n`` random configurations and the
default (``hpsearch.data.surrogates._lcbench._reference_best``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hpsearch.data.surrogates import _lcbench
from hpsearch.data.surrogates._lcbench import DATA, OUTPUTS, PARAMS, LCBench


def _configs(n: int, seed: int) -> list[dict[str, Any]]:
    """The default, the space's low and high corners, then random configurations."""
    bench = LCBench()
    space = bench.space()
    fixed = [
        bench.default(),
        {name: p["low"] for name, p in space.items()},
        {name: p["high"] for name, p in space.items()},
    ]
    rows = _lcbench._random_configs(max(n - len(fixed), 0), seed)
    random = [
        {
            name: int(value) if space[name]["type"] == "int" else float(value)
            for name, value in zip(PARAMS, row, strict=True)
        }
        for row in rows
    ]
    return (fixed + random)[:n]


def speed(curves: int, epochs: int) -> None:
    bench = LCBench()
    configs = _configs(curves, seed=1)
    bench.curve(configs[0], "3945", epochs)  # the session, outside the timing
    _lcbench._evaluate.cache_clear()
    instances = bench.instances
    for label in ("cold (every curve evaluated)", "warm (every curve cached)"):
        start = time.perf_counter()
        for i, config in enumerate(configs):
            bench.curve(config, instances[i % len(instances)], epochs)
        elapsed = time.perf_counter() - start
        print(f"{label}: {curves} curves of {epochs} epochs, {elapsed / curves * 1e3:.3f} ms each")


def check(n: int, instances: list[str], golden: Path | None) -> None:
    configs = _configs(n, seed=2)
    bench = LCBench()
    worst = 0.0
    written: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(DATA, Path(tmp) / "lcbench")
        # yahpo-gym's settings file, in the temporary folder rather than ~/.config
        os.environ["YAHPO_LOCAL_CONFIG"] = str(Path(tmp) / "yahpo_gym.yaml")
        from yahpo_gym import BenchmarkSet, local_config

        local_config.init_config(data_path=tmp)
        local_config.set_data_path(tmp)
        for instance in instances:
            yahpo = BenchmarkSet("lcbench", instance=instance, multithread=False)
            for i, config in enumerate(configs):
                asked = [
                    {**config, "OpenML_task_id": instance, "epoch": e}
                    for e in range(1, bench.max_epochs + 1)
                ]
                theirs = np.array(
                    [[row[k] for k in OUTPUTS] for row in yahpo.objective_function(asked)]
                )
                curve = bench.curve(config, instance, bench.max_epochs)
                ours = np.array([curve.metrics[k] for k in OUTPUTS]).T
                np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
                worst = max(worst, float(np.max(np.abs(ours - theirs) / np.abs(theirs))))
                if golden is not None and i < 6:
                    # float32's shortest decimal, which reads back as the same float32
                    outputs = [[float(str(np.float32(v))) for v in row] for row in theirs.T]
                    written.append({"instance": instance, "params": config, "outputs": outputs})
    print(
        f"{len(configs)} configurations x {len(instances)} instances x {bench.max_epochs} "
        f"epochs x {len(OUTPUTS)} outputs equal to yahpo-gym's; largest relative "
        f"difference {worst:.2e}"
    )
    if golden is not None:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps({"outputs": list(OUTPUTS), "curves": written}) + "\n")
        print(f"wrote {golden} ({len(written)} curves)")


def reference_best(n: int, seed: int) -> None:
    bench = LCBench()
    best: dict[str, dict[str, float]] = {}
    start = time.perf_counter()
    for instance in bench.instances:
        for metric, value in _lcbench._reference_best(instance, n, seed).items():
            best.setdefault(metric, {})[instance] = value
    record = {
        "about": (
            "each metric's best value at epoch 52 on each instance over n random "
            "configurations (seed) and the default: "
            "hpsearch.data.surrogates._lcbench._reference_best(instance, n, seed)"
        ),
        "epoch": bench.max_epochs,
        "n": n,
        "seed": seed,
        "best": best,
    }
    path = DATA / "reference_best.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path} in {time.perf_counter() - start:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("speed")
    s.add_argument("--curves", type=int, default=2000)
    s.add_argument("--epochs", type=int, default=52)
    c = sub.add_parser("check")
    c.add_argument("--configs", type=int, default=50)
    c.add_argument("--instances", default="3945,7593,189909")
    c.add_argument("--golden", type=Path, help="write yahpo-gym's values for the tests here")
    r = sub.add_parser("reference-best")
    r.add_argument("--n", type=int, default=50_000)
    r.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.command == "speed":
        speed(args.curves, args.epochs)
    elif args.command == "check":
        check(args.configs, args.instances.split(","), args.golden)
    else:
        reference_best(args.n, args.seed)


if __name__ == "__main__":
    main()
