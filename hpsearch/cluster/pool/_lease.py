"""A study's place in a pool, from its coordinator: join, lease devices before each trial,
hand them back when it ends or pauses, and a heartbeat that keeps the leases alive and
brings back how many devices the pool wants the study to yield.

The arbiter's news (:data:`~hpsearch.cluster.pool._extension.NEWS_TOPIC`, Dask's structured
events) cuts the waits short: news that the study must yield sends the heartbeat at once,
and news that devices were freed for it wakes the coordinator's loop
(:meth:`PoolLease.wait_for_news`), which asks for its leases again."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from hpsearch.cluster.pool._extension import NEWS_TOPIC, PLUGIN_NAME, PoolArbiter

if TYPE_CHECKING:
    from distributed import Client

    from hpsearch.spec import StudySpec

log = logging.getLogger("hpsearch.pool")

#: Seconds between two heartbeats (the arbiter drops a study after ``ttl_s`` without one).
HEARTBEAT_S = 1.0


def has_arbiter(client: Client) -> bool:
    """Whether the scheduler ``client`` talks to runs the pool's arbiter."""

    def check(dask_scheduler: Any) -> bool:
        return "hpsearch-pool" in dask_scheduler.plugins

    try:
        return bool(client.run_on_scheduler(check))
    except Exception:  # a scheduler that cannot run it (another environment): no arbiter
        return False


def join_pool(client: Client, spec: StudySpec) -> PoolLease | None:
    """The study's lease on the pool its scheduler runs, or ``None`` where there is none. A
    study given ``cluster.address`` starts the arbiter in a plain Dask scheduler first, so
    that studies pointed at one scheduler share it fairly rather than race."""
    if not has_arbiter(client) and not (spec.cluster.address and install_arbiter(client)):
        return None
    share = spec.share
    return PoolLease(
        client,
        spec.name,
        weight=share.weight,
        priority=share.priority,
        max_devices=share.max_devices,
    )


def install_arbiter(client: Client) -> bool:
    """Start the arbiter in the scheduler (once; a second call leaves the running one).
    ``False`` when the scheduler cannot import hpsearch."""
    if has_arbiter(client):
        return True
    try:
        client.register_plugin(PoolArbiter(), name=PLUGIN_NAME)
    except Exception as exc:  # the scheduler's environment lacks hpsearch, say
        log.warning("the Dask scheduler cannot run the pool's arbiter: %s", exc)
        return False
    return True


def pool_status(client: Client) -> dict[str, Any]:
    """The arbiter's view of the pool: its devices, and each study's standing."""
    state: dict[str, Any] = client.sync(client.scheduler.hpsearch_pool_status)
    state["studies"] = list(state["studies"])
    return state


class PoolLease:
    """The leases of one study on a pool (thread-safe)."""

    def __init__(
        self,
        client: Client,
        study: str,
        *,
        weight: float = 1.0,
        priority: str = "normal",
        max_devices: float | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.client = client
        self.study = study
        self._settings = {"weight": weight, "priority": priority, "max_devices": max_devices}
        self._held: dict[str, float] = {}
        self._lock = threading.Lock()
        self._demand = (0.0, 1.0)
        # Devices the pool has asked back, all told: it only grows (a heartbeat's answer that
        # crossed a release is never read as a new ask); compare with what was given back.
        self.asked_total = 0.0
        self._asked_before = 0.0  # what earlier memberships asked (the pool dropped the study)
        self.reason = ""  # why, from the latest heartbeat
        self.share = 0.0
        self._closed = threading.Event()
        self._beat_now = threading.Event()  # the arbiter asked the study to yield: beat now
        self._news = threading.Event()  # something for the coordinator's loop to look at
        _listen(client, self)
        try:
            answer = self._call("join", **self._settings, address=str(client.id))
        except BaseException:
            _forget(client, self)
            raise
        self.resource: str = answer["resource"]
        self.capacity: float = answer["capacity"]
        self._thread = threading.Thread(
            target=self._beat, args=(heartbeat_s,), name="hpsearch-pool-heartbeat", daemon=True
        )
        self._thread.start()

    def _call(self, op: str, **fields: Any) -> Any:
        handler = getattr(self.client.scheduler, f"hpsearch_pool_{op}")
        return self.client.sync(handler, study=self.study, **fields)

    def want(self, demand: float, next_size: float) -> None:
        """What the study could use now (devices held and waiting), and its next trial's size."""
        self._demand = (demand, next_size)

    def acquire(self, key: str, size: float) -> bool:
        """A lease of ``size`` devices for the trial ``key``, if the pool grants it now."""
        demand, _ = self._demand
        with self._lock:
            if key in self._held:
                return True
            granted = bool(self._call("acquire", lease=key, size=size, demand=demand))
            if granted:
                self._held[key] = size
            return granted

    def release(self, key: str) -> None:
        with self._lock:
            if self._held.pop(key, None) is None:
                return
        with contextlib.suppress(Exception):  # the pool's expiry frees it anyway
            self._call("release", lease=key)

    def held(self) -> float:
        with self._lock:
            return sum(self._held.values())

    def news(self, why: str) -> None:
        """The arbiter's news for this study (on the client's event loop: only flags here)."""
        if why == "yield":
            self._beat_now.set()
        else:
            self._news.set()

    def wait_for_news(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for news the coordinator should act on (devices freed, or a
        heartbeat's answer that asks for more devices back); whether any came."""
        came = self._news.wait(seconds)
        self._news.clear()
        return came

    def _beat(self, every: float) -> None:
        while True:
            self._beat_now.wait(every)
            self._beat_now.clear()
            if self._closed.is_set():
                return
            demand, next_size = self._demand
            try:
                answer = self._call("heartbeat", demand=demand, next_size=next_size)
                if not answer.get("joined"):  # dropped after a long silence: join again
                    self._asked_before = self.asked_total
                    self._call("join", **self._settings, address=str(self.client.id))
                    with self._lock:
                        held = dict(self._held)
                    for key, size in held.items():
                        self._call("acquire", lease=key, size=size, demand=demand, held=True)
                    continue
                total = self._asked_before + float(answer["yield_total"])
                asked_more = total > self.asked_total + 1e-9
                self.asked_total = max(self.asked_total, total)
                self.reason = str(answer.get("reason") or "")
                self.share = float(answer["share"])
                if asked_more:
                    self._news.set()  # the loop picks the trials that yield now
            except Exception as exc:  # the scheduler is gone: the study's own loop sees it
                if self._closed.is_set():
                    return
                log.debug("pool heartbeat failed: %s", exc)

    def close(self) -> None:
        """Leave the pool: every lease is released at once."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._beat_now.set()
        _forget(self.client, self)
        with contextlib.suppress(Exception):
            self._call("leave")
        self._thread.join(timeout=5)


# The arbiter's news reaches each client on one topic; the leases of a client (one, unless
# several studies share a client) are told the news for their study.
_leases: dict[str, dict[str, PoolLease]] = {}
_leases_lock = threading.Lock()


def _listen(client: Client, lease: PoolLease) -> None:
    # The subscription reaches the scheduler with the client's next batch of messages (some
    # milliseconds): news sent before it is lost, and the heartbeat tells instead.
    with _leases_lock:
        mine = _leases.setdefault(client.id, {})
        if not mine:
            try:
                client.subscribe_topic(NEWS_TOPIC, _told_to(client.id))
            except Exception as exc:  # no news: the heartbeat and the loop's looks still tell
                log.debug("the pool's news cannot reach this client: %s", exc)
        mine[lease.study] = lease


def _forget(client: Client, lease: PoolLease) -> None:
    with _leases_lock:
        mine = _leases.get(client.id, {})
        if mine.get(lease.study) is lease:
            del mine[lease.study]
        if not mine:
            _leases.pop(client.id, None)
            with contextlib.suppress(Exception):  # the client is closing already
                client.unsubscribe_topic(NEWS_TOPIC)


def _told_to(client_id: str) -> Any:
    def told(event: tuple[float, dict[str, Any]]) -> None:
        _, news = event
        lease = _leases.get(client_id, {}).get(str(news.get("study")))
        if lease is not None:
            lease.news(str(news.get("why")))

    return told
