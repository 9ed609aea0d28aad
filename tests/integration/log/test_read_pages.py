"""Paged reads on PostgreSQL (with the next page prefetched): limits across pages, the paged replay of
``load_state``, and a corrupt row that stops a read or a replay mid-page leaves the pool usable."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from services.allocator.adapters import pg_replay, postgres
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.adapters.replay import fold
from services.allocator.domain import digest
from services.allocator.domain.state import ClusterState
from services.allocator.ports import CorruptEventError
from tests.contract import scenario

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(pg_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch) -> PostgresEventStore:
    monkeypatch.setattr(postgres, "READ_PAGE", 3)
    monkeypatch.setattr(pg_replay, "PAGE", 3)
    lease = await PostgresLeaseStore(pg_pool).acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
    assert lease is not None
    store = PostgresEventStore(pg_pool)
    state = ClusterState.empty()
    for decided in scenario.story():
        state = scenario.fold_batch(state, [decided])
        await store.append([decided], lease="allocator", epoch=lease.epoch, state=state)
    return store


@pytest.mark.parametrize(("after", "limit", "expected"), [
    (0, None, list(range(1, 13))), (2, 7, list(range(3, 10))), (0, 3, [1, 2, 3]), (10, 5, [11, 12]), (4, 0, []),
])
async def test_pages_and_limits(store: PostgresEventStore, after: int, limit: int | None, expected: list[int]) -> None:
    assert [s.position async for s in store.read(after=after, limit=limit)] == expected


async def test_a_corrupt_row_mid_read_leaves_the_pool_usable(store: PostgresEventStore, pg_pool: asyncpg.Pool) -> None:
    await pg_pool.execute("UPDATE events SET data = '{\"type\": \"nope\"}' WHERE position = 5")
    seen = []
    with pytest.raises(CorruptEventError, match="position 5"):
        async for stored in store.read():
            seen.append(stored.position)
    assert seen == [1, 2, 3, 4]
    for _ in range(4):  # every pooled connection still answers
        assert [s.position async for s in store.read(limit=2)] == [1, 2]
    assert await store.last_position() == 12


async def test_paged_replay_equals_a_fold_of_the_read(store: PostgresEventStore) -> None:
    loaded = await store.load_state()
    folded = await fold(ClusterState.empty(), store.read())
    assert loaded.position == folded.position == 12
    assert digest(loaded) == digest(folded)


async def test_a_corrupt_row_mid_replay_names_it_and_leaves_the_pool_usable(
    store: PostgresEventStore, pg_pool: asyncpg.Pool
) -> None:
    await pg_pool.execute("UPDATE events SET data = '{\"type\": \"nope\"}' WHERE position = 7")
    with pytest.raises(CorruptEventError, match=r"position 7 \(type '"):
        await store.load_state()
    for _ in range(4):
        assert [s.position async for s in store.read(limit=2)] == [1, 2]
