"""The writer's lease renewal is not starved by a long batch: deciding yields to the event loop
every ``decide_slice_s``, so the LeaseKeeper renews (here over the in-memory lease store, in real
time) while a slow ``process`` decides one batch for longer than the lease's TTL, and a standby
contending for the lease never gets it. Without the slices (the control case) it does."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime

import pytest

from events import intents
from events.decisions import AnyEvent
from services.allocator import domain
from services.allocator.adapters.leader import LeaseKeeper
from services.allocator.adapters.memory import InMemoryLeaseStore
from services.allocator.domain.state import ClusterState
from tests.integration.service.factory import register_node, request

from .twin import twin, until

TTL_S, RENEW_S = 0.6, 0.1
"""The writer trusts its lease for TTL_S - RENEW_S = 0.5 s after a renewal."""
INTENTS, SLOW_S = 300, 0.004
"""One batch of 300 intents at 4 ms each: 1.2 s of deciding, twice the lease's TTL."""


def slow(state: ClusterState, intent: intents.AnyIntent, now: datetime) -> list[AnyEvent]:
    """``domain.process`` that holds the CPU (and so the event loop) SLOW_S seconds per intent."""
    time.sleep(SLOW_S)
    return domain.process(state, intent, now)


@pytest.mark.parametrize("sliced", [True, False], ids=["sliced", "unsliced-control"])
async def test_a_batch_longer_than_the_lease_ttl_does_not_lose_the_lease(sliced: bool) -> None:
    leases = InMemoryLeaseStore()
    replica = await twin(leases=leases, lease_keeper=True, process=slow, batch_size=INTENTS + 1,
                         lease_ttl_s=TTL_S, lease_renew_s=RENEW_S)
    if not sliced:
        replica.allocator.decide_slice_s = math.inf
    standby = LeaseKeeper(leases, name="allocator", holder="standby", ttl_s=TTL_S, renew_s=RENEW_S)
    stop_standby = asyncio.Event()
    await replica.start()
    await until(lambda: replica.allocator.keeper.is_leader, what="leadership")
    standby_task = asyncio.create_task(standby.run(stop_standby))
    try:
        await replica.bus.publish(register_node("n1", gpus=8))
        for i in range(INTENTS):
            await replica.bus.publish(request(f"p{i}", tflops=1))
        if sliced:
            await until(lambda: len(replica.store.intents) == INTENTS + 1, what="the long batch decided")
            assert leases.epoch("allocator") == 1  # never expired, never taken over
            assert not standby.is_leader and replica.allocator.keeper.epoch == 1
            assert {row.epoch for row in replica.store.rows} == {1}
        else:  # the control: a batch that never yields loses the lease to a new epoch
            await until(lambda: (leases.epoch("allocator") or 0) > 1, what="the lease lost")
    finally:
        stop_standby.set()
        await asyncio.wait([standby_task], timeout=5)
        await replica.stop()
