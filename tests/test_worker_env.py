"""The environment hpsearch gives its training processes: nothing in it slows training.

What a trial sees in a real worker and rank process is checked in ``test_ddp.py``; these
check the parts against the settings that would undo them (a user's Dask config, a shell
that sets glibc's malloc thresholds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dask
import pytest

from hpsearch.cluster import worker_specs
from hpsearch.cluster._env import NANNY_CONFIG, rank_env
from hpsearch.cluster._local import CLUSTER_CONFIG

_PROBE = """
import json, sys
from hpsearch.cluster._env import tune_allocator
from hpsearch.testing.objectives import allocator_maps_each_time
before = allocator_maps_each_time()
tuned = tune_allocator()
print(json.dumps([before, tuned, allocator_maps_each_time()]))
"""


def _probe(**env: str) -> list[bool]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "HPSEARCH_"))}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_the_allocator_is_tuned_whatever_the_environment_set():
    # A bare process: glibc's dynamic threshold keeps a reused 1 MiB block in the heap.
    assert _probe() == [False, True, False]
    # Dask's nanny setting: the block is mapped anew each time, until the process tunes it.
    assert _probe(MALLOC_TRIM_THRESHOLD_="65536") == [True, True, False]
    assert _probe(MALLOC_MMAP_THRESHOLD_="131072") == [True, True, False]
    # Asked to keep the environment's allocator: left as it was.
    assert _probe(MALLOC_TRIM_THRESHOLD_="65536", HPSEARCH_MALLOC="keep") == [True, False, True]


@pytest.mark.parametrize("config", [CLUSTER_CONFIG, NANNY_CONFIG])
def test_a_users_dask_config_sets_nothing_before_a_worker_starts(config):
    from distributed import Nanny

    users = {
        "distributed.nanny.pre-spawn-environ": {
            "MALLOC_TRIM_THRESHOLD_": 65536,
            "OMP_NUM_THREADS": 1,
            "MKL_NUM_THREADS": 1,
            "OPENBLAS_NUM_THREADS": 1,
        }
    }
    (spec,) = worker_specs(gpus=None, gpus_per_trial=2, n_slots=2, n_cores=4)[0].values()
    with dask.config.set(users), dask.config.set(config):
        nanny = Nanny("tcp://127.0.0.1:1", **spec["options"])  # made, never started
    assert not {"MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS"} & set(nanny.pre_spawn_env)
    assert nanny.env["OMP_NUM_THREADS"] == nanny.env["OPENBLAS_NUM_THREADS"] == "4"
    assert "MALLOC_TRIM_THRESHOLD_" not in nanny.env


def test_a_rank_process_gets_its_share_of_threads():
    env = rank_env(kind="cpu", device_id=1, threads=3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"


_ENDS = """
import logging, sys
from hpsearch._process import freeze_heap_at_exit
freeze_heap_at_exit()
out = open(sys.argv[1] + "/left-open.txt", "w")  # never closed: flushed as the process ends
out.write("written")
handler = logging.FileHandler(sys.argv[1] + "/log.txt", delay=False)
logging.getLogger("ends").addHandler(handler)
logging.getLogger("ends").warning("logged")
import atexit
atexit.register(lambda: open(sys.argv[1] + "/handler.txt", "w").write("ran"))
"""


def test_a_process_that_freezes_its_heap_at_exit_still_ends_cleanly(tmp_path):
    """Workers and the ``hpsearch`` command skip the collections of their shutdown; exit
    handlers, the logging shutdown and the flush of a file left open still happen."""
    done = subprocess.run([sys.executable, "-c", _ENDS, str(tmp_path)], timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "left-open.txt").read_text() == "written"
    assert (tmp_path / "log.txt").read_text().strip() == "logged"
    assert (tmp_path / "handler.txt").read_text() == "ran"
