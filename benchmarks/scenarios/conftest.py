"""The long scenarios: wider variants of what the suite in ``tests/`` proves, kept out of it
so that the suite stays within minutes on two cores. Run them (11 scenarios, about 3
minutes and 220 CPU-seconds on two cores) with

    python -m pytest benchmarks/scenarios -p no:cacheprovider

from the repository root. They use the suite's fixtures and helpers.
"""

from tests.conftest import (  # noqa: F401 (fixtures, found by pytest by name)
    _quiet,
    _two_slot_cluster,
    dask_client,
    one_slot_cluster,
    run_dir,
    two_slot_client,
)
from tests.test_pool import pool  # noqa: F401
from tests.test_scale_out import database  # noqa: F401
