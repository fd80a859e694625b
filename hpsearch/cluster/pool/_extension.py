"""The pool's arbiter in the Dask scheduler: a scheduler plugin that holds the pool's
:class:`~hpsearch.cluster.pool._fair.PoolState` and answers the coordinators' requests.

It is reached the way Dask's own semaphores are: through handlers it adds to the scheduler
(``hpsearch_pool_*``), which a client calls over its connection to the scheduler
(:class:`~hpsearch.cluster.pool._lease.PoolLease`). Nothing listens beside Dask. The pool's size is
read from the workers on each request (their ``GPU`` resources, or ``SLOT`` where none has
GPUs), so workers that join or leave change it at once. Studies whose coordinator sends no
heartbeat for ``ttl_s`` seconds are dropped by a periodic callback. While it runs, the
scheduler's ``/metrics`` (its HTTP server, the dashboard's port) serves the pool's series too
(:mod:`hpsearch.cluster.pool._metrics`).

What a coordinator must act on is also told to it at once, not only in the answer to its next
heartbeat: when a request makes the arbiter ask a study to yield devices, or frees devices
that a study waits for, the arbiter logs an event on the scheduler's topic :data:`NEWS_TOPIC`
(``{"study": name, "why": "yield" | "free"}``), which Dask sends straight on to the clients
subscribed to it (``Client.subscribe_topic``: Dask's structured events, over the connection
the coordinator already has). The news says only whom to wake; what the study must do is
still read from the arbiter (a heartbeat or a lease request), so a lost event costs at most
the wait for the next heartbeat.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

from hpsearch.cluster.pool._fair import DEFAULT_TTL_S, PoolState
from hpsearch.cluster.pool._metrics import PoolCollector, expose, withdraw

if TYPE_CHECKING:
    from distributed import Scheduler

#: The plugin's name in the scheduler (one arbiter per scheduler).
PLUGIN_NAME = "hpsearch-pool"
#: Seconds between two looks for studies whose heartbeat stopped.
EXPIRE_EVERY_S = 1.0
#: The scheduler's event topic on which the arbiter tells coordinators what changed for them.
NEWS_TOPIC = "hpsearch-pool-news"
_EPS = 1e-9


def pool_capacity(scheduler: Scheduler) -> tuple[str, float]:
    """The resource the pool's workers advertise (``GPU`` or ``SLOT``) and its total."""
    workers = list(scheduler.workers.values())
    key = "GPU" if any(ws.resources.get("GPU") for ws in workers) else "SLOT"
    return key, float(sum(ws.resources.get(key, 0) for ws in workers))


def metrics_url(scheduler: Scheduler) -> str:
    """Where ``scheduler`` serves ``/metrics`` (``""`` without its HTTP server)."""
    from distributed.comm import get_address_host

    port = getattr(getattr(scheduler, "http_server", None), "port", None)
    if not port:
        return ""
    return f"http://{get_address_host(scheduler.address)}:{port}/metrics"


class PoolArbiter(SchedulerPlugin):
    """Arbitrates a Dask scheduler's devices among the studies that run on it."""

    name = PLUGIN_NAME
    idempotent = True  # registered again by another coordinator: the one running stays

    def __init__(self, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.ttl_s = ttl_s
        self.state = PoolState(ttl_s)
        self.resource = "SLOT"
        self.expired: list[str] = []  # studies dropped for a missing heartbeat, last first
        self.expired_total = 0
        self._collector: PoolCollector | None = None

    async def start(self, scheduler: Scheduler) -> None:
        from tornado.ioloop import PeriodicCallback

        self.scheduler = scheduler
        scheduler.handlers.update(
            {
                "hpsearch_pool_join": self.join,
                "hpsearch_pool_heartbeat": self.heartbeat,
                "hpsearch_pool_acquire": self.acquire,
                "hpsearch_pool_release": self.release,
                "hpsearch_pool_leave": self.leave,
                "hpsearch_pool_status": self.status,
            }
        )
        callback = PeriodicCallback(self._expire, EXPIRE_EVERY_S * 1000)
        scheduler.periodic_callbacks["hpsearch-pool-expire"] = callback
        callback.start()
        self._collector = expose(self)

    async def close(self) -> None:
        withdraw(self._collector)
        self._collector = None

    def now(self) -> float:
        """The time, with the pool's size read from the workers."""
        self.resource, self.state.capacity = pool_capacity(self.scheduler)
        return time.time()

    def _expire(self) -> None:
        before = self._standing()
        for name in self.state.expire(self.now()):
            self.expired.insert(0, name)
            self.expired_total += 1
            del self.expired[20:]
        self._tell(before)

    # What changed for whom: the news the coordinators get at once.

    def _standing(self) -> tuple[float, dict[str, float]]:
        """The free devices, and what each study was asked to yield all told."""
        return self.state.free(), {n: c.yield_total for n, c in self.state.studies.items()}

    def _tell(self, before: tuple[float, dict[str, float]], caller: str = "") -> None:
        """Tell each study that a request (of ``caller``) asked to yield more, and each other
        study that waits for devices when some were freed (see the module's text)."""
        free, asked = before
        freed = self.state.free() > free + _EPS
        for name, claim in self.state.studies.items():
            if claim.yield_total > asked.get(name, 0.0) + _EPS:
                self.scheduler.log_event(NEWS_TOPIC, {"study": name, "why": "yield"})
            elif freed and name != caller and claim.waiting:
                self.scheduler.log_event(NEWS_TOPIC, {"study": name, "why": "free"})

    # Handlers: called with the request's fields as keyword arguments.

    def join(
        self,
        study: str,
        weight: float = 1.0,
        priority: str = "normal",
        max_devices: float | None = None,
        address: str = "",
    ) -> dict[str, Any]:
        now = self.now()
        self.state.join(
            study, now, weight=weight, priority=priority, max_devices=max_devices, address=address
        )
        return {"resource": self.resource, "capacity": self.state.capacity, "ttl_s": self.ttl_s}

    def heartbeat(self, study: str, demand: float, next_size: float) -> dict[str, Any]:
        before = self._standing()
        answer = self.state.heartbeat(study, self.now(), demand, next_size)
        self._tell(before, study)
        return answer

    def acquire(
        self, study: str, lease: str, size: float, demand: float, held: bool = False
    ) -> bool:
        before = self._standing()
        granted = self.state.acquire(study, lease, size, self.now(), demand, held=held)
        self._tell(before, study)
        return granted

    def release(self, study: str, lease: str) -> None:
        before = self._standing()
        self.state.release(study, lease, self.now())
        self._tell(before, study)

    def leave(self, study: str) -> None:
        before = self._standing()
        self.state.leave(study, self.now())
        self._tell(before, study)

    def status(self) -> dict[str, Any]:
        out = self.state.status(self.now())
        out.update(resource=self.resource, workers=len(self.scheduler.workers))
        out["expired"] = list(self.expired)
        out["metrics"] = metrics_url(self.scheduler)
        return out
