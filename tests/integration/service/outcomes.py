"""Reading what the allocator decided, per intent stream message, from a real PostgreSQL log."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import asyncpg
import msgspec

from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.api.verify import verify
from services.allocator.api.views import OUTCOME_TYPES


class Outcome(msgspec.Struct):
    """One decided intent stream message: its log key and the types of its events."""

    stream_seq: int
    intent_id: str
    types: list[str]


async def outcomes(pool: asyncpg.Pool) -> dict[int, Outcome]:
    """Every processed intent by stream sequence, with its events' types in log order."""
    rows = await pool.fetch("SELECT p.stream_seq, p.intent_id, array_agg(e.type ORDER BY e.position) AS types "
                            "FROM processed_intents p JOIN events e USING (intent_id) "
                            "GROUP BY p.stream_seq, p.intent_id")
    return {int(r["stream_seq"]): Outcome(int(r["stream_seq"]), r["intent_id"], list(r["types"])) for r in rows}


async def wait_decided(pool: asyncpg.Pool, intent_id: str, *, timeout_s: float = 60.0) -> None:
    """Wait until ``intent_id`` is in processed_intents (a liveness bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not await pool.fetchval("SELECT 1 FROM processed_intents WHERE intent_id = $1", intent_id):
        if time.monotonic() > deadline:
            raise AssertionError(f"{intent_id} not decided within {timeout_s}s")
        await asyncio.sleep(0.02)


async def rejected_reason(pool: asyncpg.Pool, intent_id: str) -> str:
    """The reason of ``intent_id``'s IntentRejected ('' when it has none)."""
    value = await pool.fetchval("SELECT data->>'reason' FROM events WHERE intent_id = $1 AND type = "
                                "'intent_rejected'", intent_id)
    return str(value or "")


async def check_one_outcome_each(pool: asyncpg.Pool) -> None:
    """Every request has exactly one first outcome and the log replays to its read models."""
    rows = await pool.fetch("SELECT intent_id, type, data->>'from_queue' AS q FROM events ORDER BY position")
    first = Counter(r["intent_id"] for r in rows if r["type"] in OUTCOME_TYPES and r["q"] is None)
    assert all(count == 1 for count in first.values()), first.most_common(3)
    report = await verify(PostgresEventStore(pool))
    assert report.ok, report.problems
