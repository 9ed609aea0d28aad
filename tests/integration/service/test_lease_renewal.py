"""A long batch does not cost the writer its lease on the real PostgreSQL lease store: each
renewal is a few round trips, and deciding yields to the event loop every decide slice, so they
complete while a slow ``process`` decides one batch for twice the lease's TTL, and a standby
contending for the lease on the same database never gets it (intents on the in-memory bus)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import asyncpg
import msgspec
import pytest

from events import intents
from events.decisions import AnyEvent
from services.allocator import bootstrap, domain
from services.allocator.adapters.leader import LeaseKeeper
from services.allocator.adapters.memory_bus import MemoryBus
from services.allocator.adapters.postgres import PostgresLeaseStore
from services.allocator.domain.state import ClusterState
from services.allocator.settings import AllocatorSettings
from services.shared import lifecycle

from .factory import register_node, request
from .harness import FAST, until

pytestmark = pytest.mark.integration

TTL_S, RENEW_S = 0.8, 0.1
"""The writer trusts its lease for TTL_S - RENEW_S = 0.7 s after a renewal."""
INTENTS, SLOW_S = 400, 0.004
"""One batch of 400 intents at 4 ms each: 1.6 s of deciding, twice the lease's TTL."""


def slow(state: ClusterState, intent: intents.AnyIntent, now: datetime) -> list[AnyEvent]:
    """``domain.process`` holding the CPU (and so the event loop) SLOW_S seconds per intent."""
    time.sleep(SLOW_S)
    return domain.process(state, intent, now)


async def test_a_batch_twice_the_lease_ttl_keeps_the_postgresql_lease(database_url: str,
                                                                      pg_pool: asyncpg.Pool) -> None:
    settings = msgspec.convert({**FAST, "nats_url": "nats://unused:1", "database_url": database_url,
                                "lease_ttl_s": TTL_S, "lease_renew_s": RENEW_S, "batch_size": INTENTS + 1},
                               AllocatorSettings)
    bus = MemoryBus()
    teardown = lifecycle.Teardown()
    stop = asyncio.Event()
    standby = LeaseKeeper(PostgresLeaseStore(pg_pool), name="allocator", holder="standby", ttl_s=TTL_S,
                          renew_s=RENEW_S)
    tasks: list[asyncio.Task[None]] = []
    try:
        allocator = await bootstrap.bootstrap(settings, teardown=teardown, bus=bus, process=slow)
        tasks.append(asyncio.create_task(allocator.run(stop)))
        await until(lambda: allocator.keeper.is_leader, what="leadership")
        tasks.append(asyncio.create_task(standby.run(stop)))
        await bus.publish(register_node("n1", gpus=8))
        for i in range(INTENTS):
            await bus.publish(request(f"p{i}", tflops=1))
        await until(lambda: bus.ack_floor == INTENTS + 1, what="the long batch decided and acked")
        assert await pg_pool.fetchval("SELECT epoch FROM leases WHERE name = 'allocator'") == 1
        assert await pg_pool.fetchval("SELECT count(*) FROM processed_intents") == INTENTS + 1
        assert set(await pg_pool.fetch("SELECT DISTINCT epoch FROM events")) == {(1,)}
        assert not standby.is_leader and allocator.keeper.epoch == 1
    finally:
        stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await teardown.close()
