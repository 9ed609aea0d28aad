"""PostgreSQL EventStore and LeaseStore (asyncpg): fenced, gapless, one transaction per append.

The append transaction (see docs/architecture.md):
1. ``LOCK TABLE events IN EXCLUSIVE MODE``: appenders queue here, so a position is assigned only
   after the previous append committed: positions are gapless and in commit order, and readers
   never see a hole (readers are not blocked: SELECT takes ACCESS SHARE).
2. ``SELECT epoch FROM leases ... FOR SHARE``: the fence. An epoch other than the writer's raises
   FencedError (the transaction rolls back: nothing written). The share lock makes a concurrent
   lease take-over wait until this append commits, so a deposed writer cannot commit afterwards.
3. Events and processed intents (``INSERT ... SELECT unnest(...)``, one statement each), then the
   read models. A duplicate intent id violates the primary key: DuplicateIntentError, nothing written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from events import codec
from services.allocator.adapters import pg_replay, projection
from services.allocator.adapters.replay import decode_row, encode_for_log
from services.allocator.adapters.tables import ALLOCATION_COLUMNS, GPU_COLUMNS, QUOTA_COLUMNS
from services.allocator.domain.state import ClusterState, decode_snapshot, encode_snapshot
from services.allocator.ports import DecidedIntent, DuplicateIntentError, FencedError, Lease, StoredEvent

READ_PAGE = 20_000
"""Rows fetched per round trip when reading the log."""

KEEP_SNAPSHOTS = 3
"""Snapshots kept; older ones are deleted when a new one is saved."""

_FENCE = """
SELECT l.epoch, (SELECT coalesce(max(position), 0) FROM events), clock_timestamp()
FROM leases l WHERE l.name = $1 FOR SHARE OF l
"""
_INSERT_EVENTS = """
INSERT INTO events (position, recorded_at, epoch, intent_id, type, data)
SELECT p, $2, $3, i, t, d::jsonb FROM unnest($1::bigint[], $4::text[], $5::text[], $6::text[]) AS u(p, i, t, d)
"""
_INSERT_INTENTS = """
INSERT INTO processed_intents (intent_id, stream_seq, position)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])
"""
_PATCH_TYPES = {
    "status": "text", "node": "text", "gpus": "text", "granted_at": "timestamptz", "released_at": "timestamptz",
    "release_reason": "text", "resized_at": "timestamptz", "from_queue": "boolean", "request_milli_tflops": "bigint",
    "request_vram_bytes": "bigint", "request_compute_milli_percent": "bigint", "limit_milli_tflops": "bigint",
    "limit_vram_bytes": "bigint", "last_position": "bigint",
}
_SEP = "\x1f"
"""Joins GPU names inside one patch array element (names never contain a control character)."""
_PATCH = (
    "UPDATE allocations a SET "
    + ", ".join("gpus = coalesce(string_to_array(u.gpus, E'\\x1f'), a.gpus)" if c == "gpus"
                else f"{c} = coalesce(u.{c}, a.{c})" for c in _PATCH_TYPES)
    + ", resize_count = a.resize_count + u.resize_delta FROM unnest($1::text[], "
    + ", ".join(f"${i + 2}::{t}[]" for i, t in enumerate(_PATCH_TYPES.values()))
    + f", ${len(_PATCH_TYPES) + 2}::int[]) AS u(allocation_id, {', '.join(_PATCH_TYPES)}, resize_delta)"
    + " WHERE a.allocation_id = u.allocation_id AND a.status IN ('queued', 'granted')"
)
_GPU_TYPES = ("text", "text", "text", "text", "text", "bigint", "bigint", "bigint", "bigint", "bigint", "bigint", "int")
_UPDATE_GPUS = (
    "UPDATE gpus g SET " + ", ".join(f"{c} = u.{c}" for c in GPU_COLUMNS[1:]) + " FROM unnest("
    + ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(_GPU_TYPES))
    + f") AS u({', '.join(GPU_COLUMNS)}) WHERE g.name = u.name"
)
_UPSERT_GPUS = (
    f"INSERT INTO gpus ({', '.join(GPU_COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(_GPU_TYPES))
    + ") ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in GPU_COLUMNS[1:])
)
_READ = """
SELECT position, recorded_at, epoch, intent_id, type, data::text FROM events
WHERE position > $1 ORDER BY position LIMIT $2
"""


class PostgresEventStore:
    """EventStore on PostgreSQL through an asyncpg pool (schema: migrations/, tables.py)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def append(self, batch: Sequence[DecidedIntent], *, lease: str, epoch: int,
                     state: ClusterState) -> list[StoredEvent]:
        """Append ``batch`` in one transaction (see the module docstring); returns the stored events.

        Raises FencedError when ``epoch`` is not the lease's epoch (or the lease does not exist),
        DuplicateIntentError when an intent id was already processed; both write nothing.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
            fence = await conn.fetchrow(_FENCE, lease)
            if fence is None or fence[0] != epoch:
                current = None if fence is None else fence[0]
                raise FencedError(f"lease {lease!r} epoch is {current}, writer has {epoch}: append refused")
            last, now = int(fence[1]), fence[2]
            stored = _stored(batch, first=last + 1, now=now, epoch=epoch)
            try:
                await _insert_log(conn, batch, stored, epoch=epoch, now=now, last=last)
            except asyncpg.UniqueViolationError as exc:
                raise DuplicateIntentError(f"an intent of the batch was already processed: {exc.detail}") from exc
            await _project(conn, stored, state)
        return stored

    async def processed(self, intent_ids: Sequence[str]) -> set[str]:
        """The subset of ``intent_ids`` present in ``processed_intents``."""
        rows = await self.pool.fetch("SELECT intent_id FROM processed_intents WHERE intent_id = any($1::text[])",
                                     list(intent_ids))
        return {r[0] for r in rows}

    async def read(self, *, after: int = 0, limit: int | None = None) -> AsyncIterator[StoredEvent]:
        """Events after ``after`` in position order, fetched in pages of READ_PAGE rows (the next page
        is requested before the current one is decoded, so the server works while we decode).

        Raises CorruptEventError (naming position and type) at the first undecodable row.
        """
        remaining = READ_PAGE if limit is None else limit
        async with self.pool.acquire() as conn:
            pending: asyncio.Task[tuple[list[Any], int]] | None = _fetch_page(conn, after, remaining)
            try:
                while pending is not None:
                    rows, page = await pending
                    remaining -= 0 if limit is None else len(rows)
                    pending = None
                    if len(rows) == page and remaining > 0:
                        pending = _fetch_page(conn, rows[-1][0], remaining)
                        await asyncio.sleep(0)  # the next query goes out before we decode this page
                    for row in rows:
                        yield decode_row(*row)
            finally:
                if pending is not None:
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, asyncpg.PostgresError):
                        await pending

    async def last_position(self) -> int:
        """Position of the newest event (0 when empty)."""
        return int(await self.pool.fetchval("SELECT coalesce(max(position), 0) FROM events"))

    async def save_snapshot(self, state: ClusterState) -> None:
        """Upsert the encoded state at ``state.position``; keep the newest KEEP_SNAPSHOTS."""
        data = encode_snapshot(state)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO snapshots (position, state, created_at) VALUES ($1, $2, now()) "
                "ON CONFLICT (position) DO UPDATE SET state = EXCLUDED.state, created_at = now()",
                state.position, data)
            await conn.execute(
                "DELETE FROM snapshots WHERE position NOT IN "
                "(SELECT position FROM snapshots ORDER BY position DESC LIMIT $1)", KEEP_SNAPSHOTS)

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        """The newest snapshot as (position, encoded state), or None."""
        row = await self.pool.fetchrow("SELECT position, state FROM snapshots ORDER BY position DESC LIMIT 1")
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def load_state(self) -> ClusterState:
        """Newest snapshot plus a replay of the events after it (empty state when none)."""
        latest = await self.latest_snapshot()
        state = ClusterState.empty() if latest is None else decode_snapshot(latest[1])
        return await pg_replay.replay_tail(self.pool, state)

    async def read_models(self) -> projection.ReadModels:
        """Every row of ``gpus``, ``allocations`` and ``quota_usage``, sorted by key."""
        async with self.pool.acquire() as conn:
            gpus = await conn.fetch("SELECT * FROM gpus ORDER BY name")
            allocations = await conn.fetch("SELECT * FROM allocations ORDER BY id")
            quotas = await conn.fetch("SELECT * FROM quota_usage ORDER BY namespace")
        return projection.ReadModels(gpus=[dict(r) for r in gpus], allocations=[dict(r) for r in allocations],
                                     quota_usage=[dict(r) for r in quotas])


def _fetch_page(conn: asyncpg.Connection, after: int, remaining: int) -> asyncio.Task[tuple[list[Any], int]]:
    page = min(READ_PAGE, remaining)

    async def fetch() -> tuple[list[Any], int]:
        return list(await conn.fetch(_READ, after, page)), page

    return asyncio.ensure_future(fetch())


def _stored(batch: Sequence[DecidedIntent], *, first: int, now: datetime, epoch: int) -> list[StoredEvent]:
    stored: list[StoredEvent] = []
    position = first
    for decided in batch:
        for event in decided.events:
            stored.append(StoredEvent(position=position, recorded_at=now, epoch=epoch,
                                      intent_id=decided.intent_id, event=event))
            position += 1
    return stored


async def _insert_log(conn: asyncpg.Connection, batch: Sequence[DecidedIntent], stored: list[StoredEvent], *,
                      epoch: int, now: datetime, last: int) -> None:
    if stored:
        await conn.execute(
            _INSERT_EVENTS, [s.position for s in stored], now, epoch, [s.intent_id for s in stored],
            [codec.tag_of(s.event) for s in stored], [encode_for_log(s.event).decode() for s in stored])
    positions, position = [], last
    for decided in batch:
        position += len(decided.events)
        positions.append(position)
    await conn.execute(_INSERT_INTENTS, [d.intent_id for d in batch], [d.stream_seq for d in batch], positions)


async def _project(conn: asyncpg.Connection, stored: list[StoredEvent], state: ClusterState) -> None:
    changes = projection.allocation_changes(stored)
    if changes.patches:
        await conn.execute(_PATCH, *_patch_arrays(changes.patches))
    if changes.inserts:
        await conn.copy_records_to_table("allocations", columns=ALLOCATION_COLUMNS, records=[
            tuple(row[c] for c in ALLOCATION_COLUMNS) for row in changes.inserts])
    touched = projection.touched(stored, state)
    if touched.nodes:
        nodes = sorted(touched.nodes)
        rows = projection.gpu_rows(state, nodes)
        await conn.execute("DELETE FROM gpus WHERE node = any($1::text[]) OR name = any($2::text[])",
                           nodes, [r["name"] for r in rows])
        await _copy(conn, "gpus", GPU_COLUMNS, rows)
    if touched.gpus:
        rows, gone = projection.gpu_rows_named(state, touched.gpus)
        if gone:
            await conn.execute("DELETE FROM gpus WHERE name = any($1::text[])", gone)
        status = await conn.execute(_UPDATE_GPUS, *([r[c] for r in rows] for c in GPU_COLUMNS)) if rows else ""
        if rows and status != f"UPDATE {len(rows)}":
            await conn.execute(_UPSERT_GPUS, *([r[c] for r in rows] for c in GPU_COLUMNS))
    if touched.namespaces:
        namespaces = sorted(touched.namespaces)
        await conn.execute("DELETE FROM quota_usage WHERE namespace = any($1::text[])", namespaces)
        await _copy(conn, "quota_usage", QUOTA_COLUMNS, projection.quota_rows(state, namespaces))


def _patch_arrays(patches: dict[str, projection.Row]) -> list[list[Any]]:
    ids = list(patches)
    arrays: list[list[Any]] = [ids]
    for column in _PATCH_TYPES:
        if column == "gpus":
            arrays.append([None if "gpus" not in p else _SEP.join(p["gpus"]) for p in patches.values()])
        else:
            arrays.append([p.get(column) for p in patches.values()])
    arrays.append([p.get("resize_delta", 0) for p in patches.values()])
    return arrays


async def _copy(conn: asyncpg.Connection, table: str, columns: tuple[str, ...], rows: list[projection.Row]) -> None:
    if rows:
        await conn.copy_records_to_table(table, columns=columns, records=[tuple(r[c] for c in columns) for r in rows])


class PostgresLeaseStore:
    """LeaseStore on the ``leases`` table: one upsert decides take / renew / refuse atomically."""

    _ACQUIRE = """
    INSERT INTO leases AS l (name, holder, epoch, expires_at) VALUES ($1, $2, 1, $3)
    ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
        epoch = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > $4 THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.holder = EXCLUDED.holder OR l.expires_at <= $4
    RETURNING name, holder, epoch, expires_at
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def acquire(self, name: str, *, holder: str, ttl_s: float, now: datetime) -> Lease | None:
        """Take the lease if free or expired at ``now`` (epoch + 1), renew it if ``holder`` has it
        (same epoch), else None. ``now`` is the caller's clock (UTC); expiry is ``now + ttl_s``."""
        now = projection.utc(now)
        row = await self.pool.fetchrow(self._ACQUIRE, name, holder, now + timedelta(seconds=ttl_s), now)
        if row is None:
            return None
        return Lease(name=row[0], holder=row[1], epoch=int(row[2]), expires_at=row[3])

    async def release(self, name: str, *, holder: str) -> None:
        """Expire the lease now if ``holder`` has it; the epoch stays (the next taker bumps it)."""
        await self.pool.execute("UPDATE leases SET expires_at = to_timestamp(0) WHERE name = $1 AND holder = $2",
                                name, holder)
