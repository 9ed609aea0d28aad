"""Leader election on the LeaseStore: one allocator writes, the others stand by.

The keeper calls ``LeaseStore.acquire`` every ``renew_s`` (taking a free or expired lease bumps
the epoch; the holder's call renews it). Only a keeper that holds the lease renews: one that does
not is refused while a live lease carries its holder name, so a second process claiming a live
holder's identity never leads beside it. It believes itself leader only until ``ttl_s`` after the
start of its last successful renewal, minus ``renew_s`` of margin, so a leader cut off from the
database stops before anyone else can take over; the epoch in every append is what makes a late
write fail (FencedError). ``release`` hands the lease over at once on a clean shutdown.

The keeper is the :class:`services.allocator.ports.Leadership` of every deployment (PostgreSQL
lease store) and of the tests that run it over the in-memory lease store. It renews on its own
task; the decision loop yields to it at least every decide slice (loop/leader.py), so a long
batch cannot starve the renewal.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from services.allocator.ports import Clock, Lease, LeaseStore, Role, utc_now
from services.shared import lifecycle

log = structlog.get_logger(__name__)

class LeaseKeeper:
    """Keeps (or waits for) the lease ``name`` for ``holder``; ``changed`` is set on every role change.

    A Leadership over any LeaseStore. ``ttl_s``/``renew_s`` in seconds; ``clock`` gives the
    lease's UTC time (the store compares expiries with it)."""

    def __init__(self, leases: LeaseStore, *, name: str, holder: str, ttl_s: float, renew_s: float,
                 clock: Clock = utc_now) -> None:
        self._leases = leases
        self.name = name
        self.holder = holder
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self._clock = clock
        self._lease: Lease | None = None
        self._valid_until = 0.0
        self.changed = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        """True while this replica holds a lease it renewed recently enough to trust."""
        return self._lease is not None and time.monotonic() < self._valid_until

    @property
    def epoch(self) -> int:
        """The fencing epoch of the held lease (0 when not leader)."""
        return self._lease.epoch if self.is_leader and self._lease is not None else 0

    @property
    def role(self) -> Role:
        """``leader`` or ``standby``."""
        return "leader" if self.is_leader else "standby"

    async def tick(self) -> bool:
        """One acquire/renew round; returns whether this replica is leader afterwards."""
        was_leader, old_epoch = self.is_leader, self.epoch
        started = time.monotonic()
        try:
            lease = await self._leases.acquire(self.name, holder=self.holder, ttl_s=self.ttl_s,
                                               now=self._clock(), renew=was_leader)
        except Exception as exc:  # database unreachable: keep the lease only while it is trusted
            log.warning("lease renewal failed", error=repr(exc))
            lease = self._lease if self.is_leader else None
        else:
            if lease is not None:
                self._valid_until = started + self.ttl_s - self.renew_s
        self._lease = lease
        if self.is_leader != was_leader or self.epoch != old_epoch:
            log.info("lease role changed", role=self.role, epoch=self.epoch, holder=self.holder)
            self.changed.set()
        return self.is_leader

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Renew or wait for the lease until ``stop`` is set or the task is cancelled."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            await self.tick()
            await lifecycle.wait_event(stop, self.renew_s)

    def step_down(self) -> None:
        """Forget the lease at once (the store reported it fenced); the next tick may re-acquire."""
        if self._lease is not None:
            self._lease = None
            self.changed.set()

    async def release(self) -> None:
        """Hand the lease over (expire it now) if held; errors are logged (it expires anyway)."""
        held, self._lease = self._lease, None
        if held is None:
            return
        try:
            await self._leases.release(self.name, holder=self.holder)
            log.info("lease released", epoch=held.epoch)
        except Exception as exc:
            log.warning("lease release failed; it will expire", error=repr(exc))
