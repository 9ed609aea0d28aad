"""The reader's reason keeper (api/keeper.py) over its projection and the in-memory History.

It writes the current reason of each queued request to the read model once, then only the reasons
a new slice of events changed; ``lookup`` serves a reason only while the keeper is as new as the
projection; a reason computed before a row's newest event never lands on it.
"""

from __future__ import annotations

import asyncio
import functools
from datetime import UTC, datetime

from events import intents
from events.values import QuotaAmount, QuotaSpec
from services.allocator import domain
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.follower import Follower
from services.allocator.api.keeper import ReasonKeeper
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent
from tests.integration.service.factory import register_node, request

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


async def _commit(store: InMemoryEventStore, state: ClusterState, epoch: int, *items: intents.AnyIntent) -> None:
    process = functools.partial(domain.process, scheduler=domain.Scheduler())
    decided = [DecidedIntent(intent_id=i.intent_id, stream_seq=0, events=tuple(process(state, i, T0))) for i in items]
    stored = await store.append(decided, lease="allocator", epoch=epoch, state=state)
    state.position = stored[-1].position


def _reason_of(store: InMemoryEventStore, allocation_id: str) -> tuple[str, str]:
    (row,) = [r for r in store.allocations.sorted_rows() if r["allocation_id"] == allocation_id
              and r["status"] == "queued"]
    return row["code"], row["reason"]


def test_the_keeper_writes_current_reasons_and_serves_them_only_when_current() -> None:
    async def run() -> None:
        leases = InMemoryLeaseStore()
        store = InMemoryEventStore(leases)
        lease = await leases.acquire("allocator", holder="w", ttl_s=60, now=T0)
        assert lease is not None
        writer = ClusterState.empty()
        await _commit(store, writer, lease.epoch, register_node("n1", gpus=1),
                      request("big", tflops=90), request("wait", tflops=50))
        follower = Follower(store)
        follower.state = await store.load_state()
        follower.loaded.set()
        keeper = ReasonKeeper(follower, store)
        follower.listeners.append(keeper.note)
        assert await keeper.refresh() == 1  # the first round rewrites every queued row
        assert keeper.lookup("wait") is not None and keeper.lookup("wait").code == "capacity"  # type: ignore[union-attr]
        assert _reason_of(store, "wait")[0] == "capacity"

        quota = QuotaSpec(total_requests=QuotaAmount(milli_tflops=40_000, vram_bytes=1 << 40))
        await _commit(store, writer, lease.epoch, intents.SetQuota(intent_id="q", namespace="team-a", spec=quota),
                      intents.ReleaseAllocation(intent_id="r", allocation_id="big"))
        await follower.catch_up()
        assert keeper.lookup("wait") is None  # the projection moved past the keeper: not served stale
        assert await keeper.refresh() == 1
        code, reason = _reason_of(store, "wait")
        assert code == "quota" and "quota" in reason
        assert keeper.lookup("wait") is not None and keeper.lookup("wait").code == "quota"  # type: ignore[union-attr]
        assert await keeper.refresh() == 0  # nothing changed since: nothing written

        rows = {"wait": ("stale", "stale", "")}
        assert await store.write_reasons(rows, position=1) == 0  # computed before the request was queued
        assert _reason_of(store, "wait")[0] == "quota"

    asyncio.run(run())
