"""Workers going away (their batch job ends) leave before the coordinator places another
trial: none lands on them again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.coordinator._clock import Clock

log = logging.getLogger("hpsearch.coordinator")

#: Seconds the coordinator waits for a retiring worker to leave before it places trials.
RETIRE_WAIT_S = 30.0


def retire_workers(client: Client, clock: Clock, workers: set[str]) -> None:
    """Retire ``workers`` before another trial is placed. Their trials have ended, and their
    results are in.

    The worker retires itself (``Worker.close_gracefully``), which closes it even where its
    data has nowhere to go (the result just read, on the cluster's last worker): the
    scheduler's ``retire_workers`` would keep such a worker, and it would take the next
    trial. The coordinator waits (up to ``RETIRE_WAIT_S``) until the scheduler has let it go:
    a trial placed on it meanwhile would be lost with it."""
    if not workers:
        return
    from hpsearch.worker import retire

    log.warning("retiring %s: its batch job ends", ", ".join(sorted(workers)))
    try:
        client.run(retire, workers=sorted(workers))
        deadline = clock.monotonic() + RETIRE_WAIT_S
        while workers & client.scheduler_info(n_workers=-1)["workers"].keys():
            if clock.monotonic() > deadline:
                log.warning("%s still there after %.0f s", sorted(workers), RETIRE_WAIT_S)
                break
            clock.sleep(0.1)
    except Exception as exc:  # gone already: nothing to place there
        log.debug("retiring %s: %s", workers, exc)
