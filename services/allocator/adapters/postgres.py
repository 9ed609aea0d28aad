"""PostgreSQL EventStore and LeaseStore (asyncpg): fenced, gapless, one transaction per append.

The append transaction (see docs/architecture.md):
1. ``BEGIN; LOCK TABLE events IN EXCLUSIVE MODE`` (one round trip, with the planner settings of
   :mod:`~services.allocator.adapters.pg_projection`): appenders queue here, so a position is assigned only
   after the previous append committed: positions are gapless and in commit order, and readers
   never see a hole (readers are not blocked: SELECT takes ACCESS SHARE).
2. ``SELECT epoch FROM leases ... FOR SHARE``: the fence. An epoch other than the writer's raises
   FencedError (the transaction rolls back: nothing written). The share lock makes a concurrent
   lease take-over wait until this append commits, so a deposed writer cannot commit afterwards.
3. Events and processed intents in one statement; while PostgreSQL runs it, the read-model rows
   are prepared (:func:`~services.allocator.adapters.pg_projection.prepare`), then written. A
   duplicate intent id violates the primary key: DuplicateIntentError, nothing written. Any error
   rolls the whole transaction back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from events import codec
from services.allocator.adapters import pg_lives, pg_projection, pg_replay, projection
from services.allocator.adapters.replay import decode_row, encode_for_log
from services.allocator.domain.state import ClusterState, encode_snapshot, resume_from
from services.allocator.ports import DecidedIntent, DuplicateIntentError, FencedError, Lease, ReasonRows, StoredEvent

READ_PAGE = 20_000
"""Rows fetched per round trip when reading the log."""

KEEP_SNAPSHOTS = 3
"""Snapshots kept; older ones are deleted when a new one is saved."""

_FENCE = """
SELECT l.epoch, (SELECT coalesce(max(position), 0) FROM events), clock_timestamp()
FROM leases l WHERE l.name = $1 FOR SHARE OF l
"""
_BEGIN = f"BEGIN; LOCK TABLE events IN EXCLUSIVE MODE; {pg_projection.PLAN_SETTINGS}"
"""Sent as one simple query: opens the append transaction, takes the append lock, pins the plans."""
_INSERT_LOG = """
WITH logged AS (
    INSERT INTO events (position, recorded_at, epoch, intent_id, type, data)
    SELECT $1::bigint + n, $2, $3, i, t, d::jsonb
    FROM unnest($4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS u(i, t, d, n)
)
INSERT INTO processed_intents (intent_id, stream_seq, position)
SELECT * FROM unnest($7::text[], $8::bigint[], $9::bigint[])
"""
_READ = """
SELECT position, recorded_at, epoch, intent_id, type, data::text FROM events
WHERE position > $1 ORDER BY position LIMIT $2
"""


class PostgresEventStore:
    """EventStore on PostgreSQL through an asyncpg pool (schema: migrations/, tables.py).

    ``statement_timeout_s``: each append transaction's ``statement_timeout`` (the allocator ties it
    to the lease TTL; None keeps the session's); when set, an append that times out waiting for the
    append lock ends the writers stalled on it for longer (:func:`end_stalled_writers`)."""

    def __init__(self, pool: asyncpg.Pool, *, statement_timeout_s: float | None = None) -> None:
        self.pool = pool
        self._begin = _BEGIN
        self._timeout_s = statement_timeout_s
        if statement_timeout_s is not None:
            ms = max(1, round(statement_timeout_s * 1000))
            self._begin = _BEGIN.replace("BEGIN;", f"BEGIN; SET LOCAL statement_timeout = {ms};", 1)

    async def append(self, batch: Sequence[DecidedIntent], *, lease: str, epoch: int,
                     state: ClusterState) -> list[StoredEvent]:
        """Append ``batch`` in one transaction (see the module docstring); returns the stored events.

        Raises FencedError when ``epoch`` is not the lease's epoch (or the lease does not exist),
        DuplicateIntentError when an intent id was already processed; both write nothing.
        """
        async with self.pool.acquire() as conn:
            try:
                await conn.execute(self._begin)
                stored = await self._append_locked(conn, batch, lease=lease, epoch=epoch, state=state)
            except BaseException as exc:
                with contextlib.suppress(Exception):  # a broken connection is reset by the pool
                    await conn.execute("ROLLBACK")
                if isinstance(exc, asyncpg.LockNotAvailableError | asyncpg.QueryCanceledError) and self._timeout_s:
                    await end_stalled_writers(self.pool, older_than_s=self._timeout_s, lease=lease)
                raise
            await conn.execute("COMMIT")
        return stored

    @staticmethod
    async def _append_locked(conn: asyncpg.Connection, batch: Sequence[DecidedIntent], *, lease: str, epoch: int,
                             state: ClusterState) -> list[StoredEvent]:
        fence = await conn.fetchrow(_FENCE, lease)
        if fence is None or fence[0] != epoch:
            current = None if fence is None else fence[0]
            raise FencedError(f"lease {lease!r} epoch is {current}, writer has {epoch}: append refused")
        last, now = int(fence[1]), fence[2]
        stored = _stored(batch, first=last + 1, now=now, epoch=epoch)
        log_write = asyncio.ensure_future(_insert_log(conn, batch, stored, epoch=epoch, now=now, last=last))
        try:  # the finally awaits the INSERT whatever happens, so the connection is never left mid-query
            await asyncio.sleep(0)  # the INSERT goes out: PostgreSQL writes the log while we prepare the rest
            prepared = pg_projection.prepare(stored, state)
        finally:
            try:
                await log_write
            except asyncpg.UniqueViolationError as exc:
                raise DuplicateIntentError(f"an intent of the batch was already processed: {exc.detail}") from exc
        await pg_projection.write(conn, prepared)
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

    async def relay_position(self, name: str) -> int | None:
        """The ``relay_position`` row of relay ``name`` (None when there is none)."""
        value = await self.pool.fetchval("SELECT position FROM relay_position WHERE name = $1", name)
        return None if value is None else int(value)

    async def save_relay_position(self, name: str, position: int) -> None:
        """Upsert relay ``name``'s position."""
        await self.pool.execute("INSERT INTO relay_position (name, position) VALUES ($1, $2) ON CONFLICT (name) "
                                "DO UPDATE SET position = EXCLUDED.position", name, position)

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        """The newest snapshot as (position, encoded state), or None."""
        row = await self.pool.fetchrow("SELECT position, state FROM snapshots ORDER BY position DESC LIMIT 1")
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def load_state(self) -> ClusterState:
        """Newest snapshot plus a replay of the events after it (from the empty state when there is
        none or it is of another projection version: ``state.resume_from``)."""
        latest = await self.latest_snapshot()
        state = resume_from(None if latest is None else latest[1])
        return await pg_replay.replay_tail(self.pool, state)

    async def events_of(self, allocation_id: str, *, limit: int) -> list[StoredEvent]:
        """History: the events naming ``allocation_id`` (:func:`pg_lives.events_of`)."""
        return await pg_lives.events_of(self.pool, allocation_id, limit)

    async def newest_of_pod(self, namespace: str, pod: str) -> str:
        """History: the allocation id of the pod's newest life ("" when none)."""
        return await pg_lives.newest_of_pod(self.pool, namespace, pod)

    async def write_reasons(self, reasons: ReasonRows, *, position: int) -> int:
        """History: the current reasons onto the queued rows no event changed after ``position``."""
        return await pg_lives.write_reasons(self.pool, reasons, position=position)

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
    """The events and one processed-intent row per decided intent, in one statement."""
    positions, position = [], last
    for decided in batch:
        position += len(decided.events)
        positions.append(position)
    await conn.execute(_INSERT_LOG, last, now, epoch, [s.intent_id for s in stored],
                       [codec.tag_of(s.event) for s in stored], [encode_for_log(s.event).decode() for s in stored],
                       [d.intent_id for d in batch], [d.stream_seq for d in batch], positions)


_END_STALLED = """
SELECT count(*) FILTER (WHERE pg_terminate_backend(w.pid)) FROM (
    SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
    WHERE l.granted AND l.pid <> pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.relation = 'leases'::regclass AND l.mode = 'RowShareLock')
           OR (l.relation = 'events'::regclass AND l.mode = 'ExclusiveLock'))
      AND (a.xact_start < clock_timestamp() - make_interval(secs => $1)
           OR EXISTS (SELECT 1 FROM leases WHERE name = $2 AND expires_at <= $3))
) AS w
"""
NEVER = datetime(1970, 1, 1, tzinfo=UTC)


async def end_stalled_writers(pool: asyncpg.Pool, *, older_than_s: float, lease: str, at: datetime = NEVER) -> int:
    """Terminate the sessions that hold the fence (``FOR SHARE`` on the lease row) or the append
    lock (``EXCLUSIVE`` on ``events``) in a transaction older than ``older_than_s`` seconds, or at
    all once lease ``lease`` has expired at ``at``; returns how many. A writer paused in the middle
    of a statement is beyond PostgreSQL's statement and idle timeouts (neither is serviced while
    the backend waits on its client), and would block every takeover; ``pg_terminate_backend``
    (allowed for the same role) ends it, its transaction rolls back, a retry is fenced."""
    return int(await pool.fetchval(_END_STALLED, older_than_s, lease, at) or 0)


class PostgresLeaseStore:
    """LeaseStore on the ``leases`` table: one upsert decides take / renew / refuse atomically."""

    _ACQUIRE = """
    INSERT INTO leases AS l (name, holder, epoch, expires_at) VALUES ($1, $2, 1, $3)
    ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
        epoch = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > $4 THEN l.epoch ELSE l.epoch + 1 END
    WHERE (l.holder = EXCLUDED.holder AND $5) OR l.expires_at <= $4
    RETURNING name, holder, epoch, expires_at
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def acquire(self, name: str, *, holder: str, ttl_s: float, now: datetime,
                      renew: bool = True) -> Lease | None:
        """Take the lease if free or expired at ``now`` (epoch + 1), renew it if ``holder`` has it
        and ``renew`` (same epoch), else None. ``now`` is the caller's clock (UTC); expiry is
        ``now + ttl_s``.

        Waits at most the session's ``lock_timeout`` for a busy lease row. When that runs out and
        the lease has expired (or the blocking transaction is older than two TTLs), the writers
        still holding the fence or the append lock are stalled: their sessions are terminated
        (:func:`end_stalled_writers`) and None is returned: the caller's
        next round takes the lease at once (a lease taken at the end of a long wait would already
        be too old to trust). Their transactions roll back; a deposed writer's retry is fenced."""
        now = projection.utc(now)
        started = time.monotonic()
        try:
            row = await self.pool.fetchrow(self._ACQUIRE, name, holder, now + timedelta(seconds=ttl_s), now, renew)
        except asyncpg.LockNotAvailableError:
            waited = timedelta(seconds=time.monotonic() - started)  # the caller's clock after the wait
            if not await end_stalled_writers(self.pool, older_than_s=2 * ttl_s, lease=name, at=now + waited):
                raise
            return None
        if row is None:
            return None
        return Lease(name=row[0], holder=row[1], epoch=int(row[2]), expires_at=row[3])

    async def release(self, name: str, *, holder: str) -> None:
        """Expire the lease now if ``holder`` has it; the epoch stays (the next taker bumps it)."""
        await self.pool.execute("UPDATE leases SET expires_at = to_timestamp(0) WHERE name = $1 AND holder = $2",
                                name, holder)
