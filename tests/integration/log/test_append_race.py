"""Two writers racing on PostgreSQL: positions stay gapless and in commit order; a deposed writer
(lease taken over mid-stream) gets FencedError and none of its later batches land."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from events import decisions as ev
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent, FencedError, StoredEvent

pytestmark = pytest.mark.integration
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _batch(writer: str, n: int) -> list[DecidedIntent]:
    """Three intents of two events each (heartbeats: no read-model work, so the race is on the log)."""
    return [DecidedIntent(intent_id=f"{writer}-{n}-{i}", stream_seq=n * 3 + i,
                          events=tuple(ev.NodeHeartbeat(at=NOW, node=f"{writer}-node", pool="p") for _ in range(2)))
            for i in range(3)]


async def _writer(store: PostgresEventStore, name: str, epoch: int, batches: int) -> list[list[StoredEvent]]:
    results = []
    for n in range(batches):
        results.append(await store.append(_batch(name, n), lease="allocator", epoch=epoch, state=ClusterState.empty()))
        await asyncio.sleep(0)
    return results


async def _stored(store: PostgresEventStore) -> list[StoredEvent]:
    return [s async for s in store.read()]


async def test_two_racing_appenders_get_gapless_contiguous_commit_ordered_positions(database_url: str) -> None:
    pools = [await asyncpg.create_pool(database_url, min_size=1, max_size=1) for _ in range(2)]
    try:
        lease = await PostgresLeaseStore(pools[0]).acquire("allocator", holder="x", ttl_s=60, now=NOW)
        assert lease is not None
        a, b = (PostgresEventStore(p) for p in pools)
        results = await asyncio.gather(_writer(a, "a", lease.epoch, 40), _writer(b, "b", lease.epoch, 40))
        log = await _stored(a)
    finally:
        for pool in pools:
            await pool.close()
    assert [s.position for s in log] == list(range(1, 2 * 40 * 6 + 1))
    for batches in results:
        for batch in batches:
            positions = [s.position for s in batch]
            assert positions == list(range(positions[0], positions[0] + 6))
            assert [log[p - 1].intent_id for p in positions] == [s.intent_id for s in batch]
    times = [s.recorded_at for s in log]
    assert times == sorted(times), "positions must follow commit order"
    switches = sum(1 for x, y in itertools.pairwise(log) if x.intent_id[0] != y.intent_id[0])
    assert switches >= 10, "the two writers really interleaved"


async def test_a_deposed_writer_is_fenced_while_the_new_leader_appends(database_url: str) -> None:
    pools = [await asyncpg.create_pool(database_url, min_size=1, max_size=1) for _ in range(2)]
    try:
        leases = PostgresLeaseStore(pools[0])
        old = await leases.acquire("allocator", holder="old", ttl_s=1, now=NOW)
        assert old is not None
        a, b = (PostgresEventStore(p) for p in pools)
        await _writer(a, "a", old.epoch, 5)
        new = await PostgresLeaseStore(pools[1]).acquire("allocator", holder="new", ttl_s=60,
                                                         now=NOW + timedelta(seconds=2))
        assert new is not None and new.epoch == old.epoch + 1
        outcome = await asyncio.gather(_writer(a, "a2", old.epoch, 5), _writer(b, "b", new.epoch, 5),
                                       return_exceptions=True)
        log = await _stored(a)
    finally:
        for pool in pools:
            await pool.close()
    assert isinstance(outcome[0], FencedError)
    assert not isinstance(outcome[1], BaseException)
    assert [s.position for s in log] == list(range(1, 61))
    assert [s.epoch for s in log] == [old.epoch] * 30 + [new.epoch] * 30
    assert not any(s.intent_id.startswith("a2") for s in log)
