"""One allocation's life read from the event log: every event that names its allocation id, in order.

On PostgreSQL the ``allocations`` read model bounds the search: each life of the id spans log
positions ``id`` (its first outcome event) to ``last_position`` (its latest grant, resize or
release), so only that range of ``events`` is scanned; a rejected resize (which changes no row)
is found through the partial index ``ix_events_resize``. The in-memory twin scans its log. Each event becomes
a :class:`Step` with a one-line description (quantities as Kubernetes strings).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from events import codec
from events import decisions as ev
from events.quantity import tflops_text, vram_text
from events.values import Resources
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.adapters.replay import decode_row
from services.allocator.ports import EventStore, StoredEvent

MAX_STEPS = 500
"""At most this many events of one allocation are shown (the oldest first)."""

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


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One event of an allocation's life: log position, commit time, event tag, what happened."""

    position: int
    recorded_at: datetime
    type: str
    text: str
    node: str = ""


def names(event: ev.AnyEvent, allocation_id: str) -> bool:
    """True when ``event`` is about ``allocation_id`` (its spec or its allocation_id field)."""
    spec = getattr(event, "spec", None)
    if spec is not None:
        return bool(spec.allocation_id == allocation_id)
    return getattr(event, "allocation_id", None) == allocation_id


async def events_of(store: EventStore, allocation_id: str, *, limit: int = MAX_STEPS) -> list[StoredEvent]:
    """The stored events naming ``allocation_id`` in position order (at most ``limit``)."""
    if isinstance(store, PostgresEventStore):
        return await _pg_events(store, allocation_id, limit)
    out: list[StoredEvent] = []
    async for stored in store.read():
        if names(stored.event, allocation_id):
            out.append(stored)
            if len(out) >= limit:
                break
    return out


async def _pg_events(store: PostgresEventStore, allocation_id: str, limit: int) -> list[StoredEvent]:
    rows: dict[int, Any] = {}
    async with store.pool.acquire() as conn:
        for life in await conn.fetch(LIVES, allocation_id):
            found = await conn.fetch(_EVENTS, allocation_id, int(life["id"]), int(life["last_position"]), limit)
            rows.update((int(row[0]), row) for row in found)
        rows.update((int(row[0]), row) for row in await conn.fetch(_RESIZES, allocation_id, limit))
    return [decode_row(*rows[position]) for position in sorted(rows)[:limit]]


def _res(value: Resources) -> str:
    return f"{tflops_text(value.milli_tflops)}, {vram_text(value.vram_bytes)} VRAM"


def describe(event: ev.AnyEvent) -> str:
    """One line saying what ``event`` did to its allocation."""
    if isinstance(event, ev.AllocationGranted):
        spec = event.spec
        where = f"granted on node {event.node}, GPUs {', '.join(event.gpus)}"
        wait = " (from the queue)" if event.from_queue else ""
        took = f", preempting {', '.join(event.preempted)}" if event.preempted else ""
        return f"{where}{wait}{took}: {spec.gpu_count} × request {_res(spec.request)}, QoS {spec.qos}"
    if isinstance(event, ev.AllocationQueued):
        quota = f" [quota {event.quota_dimension}]" if event.quota_dimension else ""
        return f"queued ({event.code}): {event.reason}{quota}"
    if isinstance(event, ev.AllocationRejected):
        return f"rejected ({event.code}): {event.reason}"
    if isinstance(event, ev.AllocationResized):
        return f"resized: request {_res(event.request)}, limit {_res(event.limit)}"
    if isinstance(event, ev.ResizeRejected):
        return f"resize rejected ({event.code}): {event.reason}; largest request that fits {_res(event.max_request)}"
    if isinstance(event, ev.AllocationPreempted):
        return f"preempted on {event.node} (GPUs {', '.join(event.gpus)}): {event.reason}"
    if isinstance(event, ev.AllocationReleased):
        what = "left the queue" if event.was_queued else f"released GPUs {', '.join(event.gpus)} on {event.node}"
        return f"{what}" + (f": {event.reason}" if event.reason else "")
    return codec.tag_of(event)


def steps(stored: list[StoredEvent]) -> list[Step]:
    """:class:`Step` of each stored event, in the given (position) order."""
    return [Step(position=s.position, recorded_at=s.recorded_at, type=codec.tag_of(s.event),
                 text=describe(s.event), node=getattr(s.event, "node", "") or "") for s in stored]
