"""The pool's arbitration, on its own: which study may start a trial on free devices, what
each study's fair share is, and which study must hand devices back.

No Dask and no clock of its own (every call is given ``now``): the Dask scheduler extension
(:mod:`hpsearch.cluster.pool._extension`) holds one :class:`PoolState`, and a simulated cluster can
hold another, so both arbitrate with the same code.

The rules:

* **Shares.** Studies are served by priority (``high`` before ``normal`` before ``low``);
  within a priority, the devices left are divided by weighted max-min fairness
  ("water-filling") among the studies that want them, each capped at what it wants
  (``demand``) and at its ``max_devices``. A study alone gets the whole pool; what one study
  does not want goes to the others (work-conserving).
* **Leases.** A study asks for a lease before it starts a trial, and gives it back when the
  trial ends or pauses. A lease is granted when the devices are free and no study with a
  better claim waits for them. A study's claim is *entitled* while it holds less than the
  whole devices of its share (``floor(share)``); beyond that it *borrows*, and among
  borrowers the one that has had the least of its share over time (its ``credit``,
  device-seconds of share minus device-seconds held) goes first, so that fractional shares
  even out over time.
* **Yielding.** When an entitled study waits and the free devices are too few, studies that
  hold more than their share are asked to yield: the lowest priority first, then the one
  furthest over its share. The study picks which of its trials pause (its lowest ranked) at
  their next epoch end; a yield is asked once and counts until the study releases.
* **Expiry.** A study that sends no heartbeat for ``ttl`` seconds (its coordinator died)
  loses its leases and leaves the pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hpsearch.spec import PRIORITIES

#: Seconds without a heartbeat after which a study's leases are dropped.
DEFAULT_TTL_S = 10.0
_EPS = 1e-9


@dataclass
class StudyClaim:
    """One study's standing in the pool."""

    name: str
    weight: float = 1.0
    priority: str = "normal"
    max_devices: float | None = None
    demand: float = 0.0  # devices it could use now: held + waiting trials
    next_size: float = 1.0  # devices its next waiting trial needs
    leases: dict[str, float] = field(default_factory=dict)  # lease id -> devices
    last_seen: float = 0.0
    joined: float = 0.0
    yield_asked: float = 0.0  # devices it was asked to hand back and still holds
    yield_for: str = ""  # why: "preempted by study X (priority high)"
    yield_total: float = 0.0  # devices it was asked to yield, all told (only grows)
    credit: float = 0.0  # device-seconds of fair share minus device-seconds held
    device_seconds: float = 0.0
    preemptions: int = 0  # devices it was asked to yield, all told
    address: str = ""  # the coordinator's client, for ``pool status``

    @property
    def held(self) -> float:
        return sum(self.leases.values())

    @property
    def wants(self) -> float:
        """Devices it could use now, within its cap."""
        cap = math.inf if self.max_devices is None else self.max_devices
        return max(0.0, min(self.demand, cap))

    @property
    def waiting(self) -> bool:
        """Whether it waits for devices it may still hold (its next trial fits its cap)."""
        return self.wants - self.held >= self.next_size - _EPS


def water_fill(total: float, claims: list[tuple[str, float, float]]) -> dict[str, float]:
    """Weighted max-min fair division of ``total`` among ``(name, weight, cap)`` claims.

    >>> water_fill(4, [("a", 1, 9), ("b", 1, 9), ("c", 2, 9)])
    {'a': 1.0, 'b': 1.0, 'c': 2.0}
    >>> water_fill(4, [("a", 1, 0.5), ("b", 1, 9)])
    {'a': 0.5, 'b': 3.5}
    """
    shares = {name: 0.0 for name, _, _ in claims}
    open_ = [(name, weight, cap) for name, weight, cap in claims if cap > _EPS]
    left = float(total)
    while open_ and left > _EPS:
        level = left / sum(weight for _, weight, _ in open_)
        capped = [(n, w, c) for n, w, c in open_ if c <= w * level + _EPS]
        if not capped:
            for name, weight, _ in open_:
                shares[name] = weight * level
            break
        for name, _, cap in capped:
            shares[name] = cap
            left -= cap
        open_ = [claim for claim in open_ if claim not in capped]
    return shares


class PoolState:
    """The arbitration of one pool of ``capacity`` devices among its studies."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.ttl_s = ttl_s
        self.capacity = 0.0
        self.studies: dict[str, StudyClaim] = {}
        self._accounted = 0.0  # when device-seconds and credits were last brought up to date

    # ------------------------------------------------------------------------- shares

    def shares(self) -> dict[str, float]:
        """Each study's fair share of the pool now, in devices."""
        shares: dict[str, float] = {}
        left = self.capacity
        for priority in reversed(PRIORITIES):
            tier = [c for c in self.studies.values() if c.priority == priority]
            part = water_fill(left, [(c.name, c.weight, c.wants) for c in tier])
            shares.update(part)
            left = max(0.0, left - sum(part.values()))
        return shares

    def free(self) -> float:
        return self.capacity - sum(c.held for c in self.studies.values())

    def _entitled(self, claim: StudyClaim, size: float, share: float) -> bool:
        return claim.held + size <= math.floor(share + _EPS) + _EPS

    def _ahead(
        self, other: StudyClaim, of: StudyClaim, size: float, shares: dict[str, float]
    ) -> bool:
        """Whether ``other``, waiting, has a better claim on the next devices than ``of``."""
        if not other.waiting or other is of:
            return False
        other_entitled = self._entitled(other, other.next_size, shares[other.name])
        if other_entitled != self._entitled(of, size, shares[of.name]):
            return other_entitled
        rank = PRIORITIES.index
        if rank(other.priority) != rank(of.priority):
            return rank(other.priority) > rank(of.priority)
        return other.credit > of.credit + _EPS

    # ------------------------------------------------------------------------ requests

    def join(self, name: str, now: float, **settings: Any) -> None:
        """Add a study, or update the settings of one that is in (a coordinator restarted)."""
        self.account(now)
        claim = self.studies.get(name)
        if claim is None:
            claim = self.studies[name] = StudyClaim(name, joined=now)
        for key, value in settings.items():
            setattr(claim, key, value)
        claim.weight = max(float(claim.weight), 1e-6)  # a share needs a weight above 0
        if claim.priority not in PRIORITIES:
            claim.priority = "normal"
        claim.last_seen = now

    def heartbeat(self, name: str, now: float, demand: float, next_size: float) -> dict[str, Any]:
        """A study says it is alive and what it wants; the answer says what it must yield."""
        self.account(now)
        claim = self.studies.get(name)
        if claim is None:
            return {"joined": False}
        claim.last_seen = now
        claim.demand = max(demand, claim.held)
        claim.next_size = next_size
        self._ask_yields()
        share = self.shares().get(name, 0.0)
        return {
            "joined": True,
            "share": share,
            "held": claim.held,
            "yield": claim.yield_asked,
            "yield_total": claim.yield_total,
            "reason": claim.yield_for,
        }

    def acquire(
        self, name: str, lease: str, size: float, now: float, demand: float, *, held: bool = False
    ) -> bool:
        """Grant ``lease`` of ``size`` devices to study ``name`` if the rules allow it now.

        ``held``: the lease is one the study already used (its trial runs) and lost when its
        heartbeat stopped for a while: it is recorded again without a check."""
        self.account(now)
        claim = self.studies.get(name)
        if claim is None:
            return False
        claim.last_seen = now
        claim.demand = max(demand, claim.held + size)
        claim.next_size = size
        if lease in claim.leases or held:
            claim.leases[lease] = size
            return True
        if claim.max_devices is not None and claim.held + size > claim.max_devices + _EPS:
            return False
        if size > self.free() + _EPS:
            self._ask_yields()
            return False
        shares = self.shares()
        ahead = [o for o in self.studies.values() if self._ahead(o, claim, size, shares)]
        reserved = sum(max(o.next_size, self._entitled_want(o, shares[o.name])) for o in ahead)
        if size > self.free() - reserved + _EPS:
            self._ask_yields()
            return False
        claim.leases[lease] = size
        return True

    def release(self, name: str, lease: str, now: float) -> None:
        self.account(now)
        claim = self.studies.get(name)
        if claim is None or lease not in claim.leases:
            return
        size = claim.leases.pop(lease)
        claim.yield_asked = max(0.0, claim.yield_asked - size)

    def leave(self, name: str, now: float) -> None:
        """A study ended: its leases are released at once."""
        self.account(now)
        self.studies.pop(name, None)

    def expire(self, now: float) -> list[str]:
        """Drop the studies whose heartbeat is older than ``ttl_s``; return their names."""
        gone = [n for n, c in self.studies.items() if now - c.last_seen > self.ttl_s]
        for name in gone:
            self.leave(name, now)
        return gone

    # ---------------------------------------------------------------------- accounting

    def account(self, now: float) -> None:
        """Bring each study's device-seconds and credit up to ``now``."""
        elapsed = max(0.0, now - self._accounted)
        self._accounted = max(self._accounted, now)
        if elapsed <= 0:
            return
        shares = self.shares()
        for claim in self.studies.values():
            held = claim.held
            claim.device_seconds += held * elapsed
            if claim.waiting or held > _EPS:
                claim.credit += (shares.get(claim.name, 0.0) - held) * elapsed
            else:
                claim.credit = min(claim.credit, 0.0)  # a study that wants nothing banks none

    def _entitled_want(self, claim: StudyClaim, share: float) -> float:
        """The devices ``claim`` waits for within the whole devices of its share."""
        want = min(math.floor(share + _EPS), claim.wants) - claim.held
        return want if want >= claim.next_size - _EPS else 0.0

    def _ask_yields(self) -> None:
        """Ask studies over their share to yield where an entitled study waits for devices."""
        shares = self.shares()
        free = self.free() + sum(c.yield_asked for c in self.studies.values())
        rank = PRIORITIES.index
        starved = sorted(
            (c for c in self.studies.values() if self._entitled_want(c, shares[c.name]) > 0),
            key=lambda c: (-rank(c.priority), -c.credit),
        )
        for waiting in starved:
            want = self._entitled_want(waiting, shares[waiting.name])
            take = min(want, max(free, 0.0))
            free -= take
            need = want - take
            donors = sorted(
                (
                    c
                    for c in self.studies.values()
                    if c is not waiting
                    and c.held - c.yield_asked > shares[c.name] + _EPS
                    and rank(c.priority) <= rank(waiting.priority)
                ),
                key=lambda c: (rank(c.priority), -(c.held - c.yield_asked - shares[c.name])),
            )
            # Whole devices first, from the lowest and furthest over; then what is left.
            for whole in (True, False):
                for donor in donors:
                    over = donor.held - donor.yield_asked - shares[donor.name]
                    give = min(math.floor(over + _EPS) if whole else math.ceil(over - _EPS), need)
                    if need <= _EPS or give <= _EPS:
                        continue
                    donor.yield_asked += give
                    donor.yield_total += give
                    donor.preemptions += 1
                    donor.yield_for = (
                        f"preempted by study {waiting.name} (priority {waiting.priority})"
                    )
                    need -= give

    def status(self, now: float) -> dict[str, Any]:
        """What ``hpsearch pool status`` shows: the pool and each study."""
        self.account(now)
        shares = self.shares()
        return {
            "capacity": self.capacity,
            "free": self.free(),
            "studies": [
                {
                    "name": c.name,
                    "weight": c.weight,
                    "priority": c.priority,
                    "max_devices": c.max_devices,
                    "held": c.held,
                    "share": shares.get(c.name, 0.0),
                    "demand": c.demand,
                    "waiting": max(0.0, c.demand - c.held),
                    "device_seconds": c.device_seconds,
                    "preemptions": c.preemptions,
                    "yielding": c.yield_asked,
                    "since": c.joined,
                }
                for c in self.studies.values()
            ],
        }
