"""A failure anywhere in the PostgreSQL append writes nothing and leaves the pool usable.

The append sends the log INSERT and prepares the read models while PostgreSQL runs it; these
tests make each half fail and check that the transaction rolled back as a whole.
"""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from services.allocator.adapters import pg_projection
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent, DuplicateIntentError
from tests.contract import scenario

pytestmark = pytest.mark.integration
NOW = datetime(2026, 3, 1, tzinfo=UTC)


async def _store(url: str) -> tuple[asyncpg.Pool, PostgresEventStore, int]:
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    lease = await PostgresLeaseStore(pool).acquire("allocator", holder="t", ttl_s=60, now=NOW)
    assert lease is not None
    return pool, PostgresEventStore(pool), lease.epoch


def _node_batch(name: str) -> tuple[list[DecidedIntent], ClusterState]:
    batch = [DecidedIntent(intent_id=f"reg-{name}", stream_seq=1, events=(scenario.node(name),))]
    return batch, scenario.fold_batch(ClusterState.empty(), batch)


async def _counts(pool: asyncpg.Pool) -> tuple[int, int, int]:
    row = await pool.fetchrow("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM processed_intents), "
                              "(SELECT count(*) FROM gpus)")
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


async def test_a_failing_read_model_preparation_rolls_back_the_log_insert(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pool, store, epoch = await _store(database_url)
    try:
        def broken(*_args: object) -> pg_projection.Prepared:
            raise RuntimeError("projection bug")

        batch, state = _node_batch("n1")
        with monkeypatch.context() as patch:
            patch.setattr(pg_projection, "prepare", broken)
            with pytest.raises(RuntimeError, match="projection bug"):
                await store.append(batch, lease="allocator", epoch=epoch, state=state)
        assert await _counts(pool) == (0, 0, 0)
        stored = await store.append(batch, lease="allocator", epoch=epoch, state=state)
        assert [s.position for s in stored] == [1]
        assert await _counts(pool) == (1, 1, 2)
    finally:
        await pool.close()


async def test_a_duplicate_intent_while_the_read_models_are_prepared_writes_nothing(database_url: str) -> None:
    pool, store, epoch = await _store(database_url)
    try:
        batch, state = _node_batch("n1")
        await store.append(batch, lease="allocator", epoch=epoch, state=state)
        again, state2 = _node_batch("n2")
        duplicate = [again[0], DecidedIntent(intent_id="reg-n1", stream_seq=3, events=again[0].events)]
        with pytest.raises(DuplicateIntentError, match="reg-n1"):
            await store.append(duplicate, lease="allocator", epoch=epoch, state=state2)
        assert await _counts(pool) == (1, 1, 2)
        assert await store.last_position() == 1
    finally:
        await pool.close()
