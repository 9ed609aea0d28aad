"""The read side's History on PostgreSQL: one allocation's events, the newest life of a pod, and
the current reasons written to the ``allocations`` read model.

The ``allocations`` read model bounds every search: each life of an id spans log positions ``id``
(its first outcome event) to ``last_position`` (its latest grant, resize or release), so only that
range of ``events`` is scanned; a rejected resize (which changes no row) is found through the
partial index ``ix_events_resize``. The reasons are written under a per-row fence (``last_position
<= position``) with ``SKIP LOCKED``: a reader never waits on the writer's row locks (so the two
never deadlock) and never overwrites a row a newer event changed.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

from services.allocator.adapters.replay import decode_row
from services.allocator.ports import ReasonRows, StoredEvent

LIVES = "SELECT id, last_position FROM allocations WHERE allocation_id = $1 ORDER BY id"
"""Every life of an allocation id in order (served by ``ix_allocations_lives``)."""
_COLUMNS = "SELECT position, recorded_at, epoch, intent_id, type, data::text FROM events"
_EVENTS = f"""{_COLUMNS}
WHERE position BETWEEN $2 AND $3
  AND (data ->> 'allocation_id' = $1 OR data -> 'spec' ->> 'allocation_id' = $1)
ORDER BY position LIMIT $4
"""
_RESIZES = f"""{_COLUMNS}
WHERE type IN ('allocation_resized', 'resize_rejected') AND (data ->> 'allocation_id') = $1
ORDER BY position LIMIT $2
"""
NEWEST_OF_POD = "SELECT allocation_id FROM allocations WHERE pod = $2 AND namespace = $1 ORDER BY id DESC LIMIT 1"
"""The allocation id of a pod's newest life."""

SET_REASONS = """
WITH u AS (
  SELECT * FROM json_to_recordset($1::json) AS u(allocation_id text, reason text, code text, quota_dimension text)
), target AS (
  SELECT a.id, u.reason, u.code, u.quota_dimension FROM allocations a JOIN u ON a.allocation_id = u.allocation_id
  WHERE a.status = 'queued' AND a.last_position <= $2
  ORDER BY a.id FOR UPDATE OF a SKIP LOCKED
)
UPDATE allocations a SET reason = t.reason, code = t.code, quota_dimension = t.quota_dimension
FROM target t WHERE a.id = t.id
"""
"""Reasons computed at log position $2 onto the queued rows no event changed after it."""


async def events_of(pool: asyncpg.Pool, allocation_id: str, limit: int) -> list[StoredEvent]:
    """The stored events naming ``allocation_id`` in position order (at most ``limit``)."""
    rows: dict[int, Any] = {}
    async with pool.acquire() as conn:
        for life in await conn.fetch(LIVES, allocation_id):
            found = await conn.fetch(_EVENTS, allocation_id, int(life["id"]), int(life["last_position"]), limit)
            rows.update((int(row[0]), row) for row in found)
        rows.update((int(row[0]), row) for row in await conn.fetch(_RESIZES, allocation_id, limit))
    return [decode_row(*rows[position]) for position in sorted(rows)[:limit]]


async def newest_of_pod(pool: asyncpg.Pool, namespace: str, pod: str) -> str:
    """The allocation id of pod ``namespace/pod``'s newest life ("" when none)."""
    return str(await pool.fetchval(NEWEST_OF_POD, namespace, pod) or "")


async def write_reasons(pool: asyncpg.Pool, reasons: ReasonRows, *, position: int) -> int:
    """Write ``reasons`` (computed at log ``position``) onto their queued rows (module docstring);
    returns the rows updated."""
    if not reasons:
        return 0
    payload = msgspec.json.encode([{"allocation_id": k, "reason": r, "code": c, "quota_dimension": d}
                                   for k, (r, c, d) in sorted(reasons.items())]).decode()
    status = await pool.execute(SET_REASONS, payload, position)
    return int(status.split()[-1])
