"""A whole allocator replica on the in-memory twins (MemoryBus, MemoryLeadership or a LeaseKeeper
over the in-memory lease store, InMemoryEventStore), wired by ``bootstrap`` itself: the loop's
rules tested without a server."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from events import codec
from services.allocator import bootstrap
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.adapters.memory_bus import MemoryBus, MemoryLeadership
from services.allocator.api.views import OUTCOME_TYPES
from services.allocator.loop import batch
from services.allocator.loop.leader import Allocator
from services.allocator.ports import Leadership
from services.allocator.settings import AllocatorSettings
from services.shared import lifecycle

FAST = {"lease_ttl_s": 1.0, "lease_renew_s": 0.2, "heartbeat_check_s": 0.0, "fetch_wait_s": 0.02,
        "retry_delay_s": 0.01, "retry_max_s": 0.05, "tail_interval_s": 0.02, "nats_url": "nats://unused:1"}
LEASE_NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Twin:
    """One replica on the twins; ``start()`` runs it as a task, ``stop()`` ends it."""

    def __init__(self, *, bus: MemoryBus, store: InMemoryEventStore, leases: InMemoryLeaseStore,
                 allocator: Allocator, teardown: lifecycle.Teardown) -> None:
        self.bus, self.store, self.leases, self.allocator = bus, store, leases, allocator
        self._teardown = teardown
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Twin:
        self._task = asyncio.create_task(self.allocator.run(self._stop))
        await asyncio.wait_for(self.allocator.loaded.wait(), 10)
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            done, _ = await asyncio.wait([self._task], timeout=10)
            assert done, "the allocator did not stop within 10 s of its stop event"
            self._task.result()
        await self._teardown.close()

    def decided(self) -> list[str]:
        """Intent ids in the order the log decided them (one per decided intent)."""
        return [intent_id for intent_id, _ in sorted(self.store.intents.items(), key=lambda item: item[1][1])]

    def first_outcomes(self) -> Counter[str]:
        """First outcome events per intent id (each decided request must have exactly one)."""
        return Counter(row.intent_id for row in self.store.rows if row.type in OUTCOME_TYPES
                       and not getattr(codec.decode_event(row.data), "from_queue", False))


async def twin(*, leadership: Leadership | None = None, process: batch.Process | None = None,
               bus: MemoryBus | None = None, leases: InMemoryLeaseStore | None = None,
               store: InMemoryEventStore | None = None, lease_keeper: bool = False, **overrides: Any) -> Twin:
    """A replica wired by ``bootstrap`` on the twins (``overrides``: AllocatorSettings fields).
    Without ``leadership`` it leads at once through a MemoryLeadership holding the in-memory lease;
    with ``lease_keeper=True`` bootstrap's own LeaseKeeper renews that lease in real time."""
    settings = msgspec.convert({**FAST, **overrides}, AllocatorSettings)
    leases = leases or InMemoryLeaseStore()
    store = store or InMemoryEventStore(leases)
    bus = bus or MemoryBus()
    if leadership is None and not lease_keeper:
        leadership = await leading("r1", leases)
    teardown = lifecycle.Teardown()
    allocator = await bootstrap.bootstrap(settings, teardown=teardown, store=store, leases=leases, bus=bus,
                                          leadership=leadership, process=process)
    return Twin(bus=bus, store=store, leases=leases, allocator=allocator, teardown=teardown)


async def leading(holder: str, leases: InMemoryLeaseStore) -> MemoryLeadership:
    """A MemoryLeadership holding the in-memory lease ``allocator`` (taken for an hour)."""
    lease = await leases.acquire("allocator", holder=holder, ttl_s=3600, now=LEASE_NOW)
    assert lease is not None
    leadership = MemoryLeadership(holder)
    leadership.grant(lease.epoch)
    return leadership


async def until(condition: Callable[[], bool], *, timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll ``condition`` until true; fail (a liveness bound, not a timing assertion) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s}s")
        await asyncio.sleep(0.005)
