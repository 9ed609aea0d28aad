"""Loading the projection from PostgreSQL fast: newest snapshot, then the tail of the log folded page by page.

Only ``position``, ``type`` and ``data`` are fetched (no timestamps to parse), the next page is
requested before the current one is folded, and each page is folded in a plain loop with the
cyclic GC paused. Decoding never skips a row: the first row that
cannot be decoded raises CorruptEventError naming its position and type.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import asyncpg

from events import codec
from services.allocator.adapters.replay import no_cyclic_gc
from services.allocator.domain import evolve
from services.allocator.domain.state import ClusterState
from services.allocator.ports import CorruptEventError

PAGE = 20_000
"""Rows per round trip."""

_TAIL = "SELECT position, type, data::text FROM events WHERE position > $1 ORDER BY position LIMIT $2"


def fold_rows(state: ClusterState, rows: Sequence[Any]) -> None:
    """Apply (position, type, data) rows in order to ``state`` with ``evolve``; sets ``state.position``."""
    for position, type_, data in rows:
        try:
            event = codec.decode_event(data)
        except codec.DecodeError as exc:
            raise CorruptEventError(
                f"event at position {position} (type {type_!r}) cannot be decoded: {exc}") from exc
        evolve(state, event)
        state.position = position


def _fetch(conn: asyncpg.Connection, after: int) -> asyncio.Task[list[Any]]:
    async def fetch() -> list[Any]:
        return list(await conn.fetch(_TAIL, after, PAGE))

    return asyncio.ensure_future(fetch())


async def replay_tail(pool: asyncpg.Pool, state: ClusterState) -> ClusterState:
    """Fold every event after ``state.position`` into ``state`` (mutated and returned)."""
    async with pool.acquire() as conn:
        pending: asyncio.Task[list[Any]] | None = _fetch(conn, state.position)
        try:
            with no_cyclic_gc():
                while pending is not None:
                    rows = await pending
                    pending = None
                    if len(rows) == PAGE:
                        pending = _fetch(conn, rows[-1][0])
                        await asyncio.sleep(0)  # the next query goes out before this page is folded
                    fold_rows(state, rows)
        finally:
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, asyncpg.PostgresError):
                    await pending
    return state
