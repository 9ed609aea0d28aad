"""One allocation's life read from the event log: every event that names its allocation id, in order.

Asked through the read side's port (:class:`~services.allocator.ports.History`: PostgreSQL bounds
the search with the ``allocations`` read model, the in-memory twin scans its log). Each event
becomes a :class:`Step` with a one-line description (quantities as Kubernetes strings).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from events import codec
from events import decisions as ev
from events.quantity import tflops_text, vram_text
from events.values import Resources
from services.allocator.ports import History, StoredEvent

MAX_STEPS = 500
"""At most this many events of one allocation are shown (the oldest first)."""


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One event of an allocation's life: log position, commit time, event tag, what happened."""

    position: int
    recorded_at: datetime
    type: str
    text: str
    node: str = ""


async def events_of(history: History, allocation_id: str, *, limit: int = MAX_STEPS) -> list[StoredEvent]:
    """The stored events naming ``allocation_id`` in position order (at most ``limit``)."""
    return await history.events_of(allocation_id, limit=limit)


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
    if isinstance(event, ev.MoveReserved):
        return (f"defrag campaign {event.campaign_id}: {event.target_node} ({', '.join(event.target_gpus)}) reserved "
                f"for its replacement until {event.expires_at.isoformat()}; its pod is evicted")
    if isinstance(event, ev.MoveCompleted):
        return (f"defrag campaign {event.campaign_id}: replacement {event.replacement_pod} ({event.replacement_id}) "
                f"granted the reserved GPUs {', '.join(event.gpus)} on {event.node}")
    if isinstance(event, ev.MoveCancelled):
        return f"defrag campaign {event.campaign_id}: move cancelled ({event.code})" + (
            f": {event.reason}" if event.reason else "")
    return codec.tag_of(event)


def steps(stored: list[StoredEvent]) -> list[Step]:
    """:class:`Step` of each stored event, in the given (position) order."""
    return [Step(position=s.position, recorded_at=s.recorded_at, type=codec.tag_of(s.event),
                 text=describe(s.event), node=getattr(s.event, "node", "") or "") for s in stored]
