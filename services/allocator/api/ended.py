"""How an allocation that is no longer live ended: released, preempted or rejected, when and why.

The API's answer for an allocation id that is not in the projection (``GET``, ``DELETE`` and
``resize`` of ``/api/v1/allocations/{id}`` answer 404 with it; ``gpuledger why`` prints it). Read
from the log through the read side's History port (:func:`services.allocator.api.lives.events_of`,
the events of the allocation's lives, as the dashboard's allocation page shows them); an id of the
form ``NAMESPACE/POD`` that names no allocation finds the newest life of that pod. None when the id
never named an allocation.
"""

from __future__ import annotations

from typing import Any

from events import decisions as ev
from events.values import AllocationSpec
from services.allocator.api import lives
from services.allocator.ports import History, StoredEvent


def _end(stored: StoredEvent) -> dict[str, Any] | None:
    """The ending fields of one event: status, reason (and code, preemptor), or None if it ends nothing."""
    event = stored.event
    if isinstance(event, ev.AllocationReleased):
        left = "left the queue" if event.was_queued else f"released GPUs {', '.join(event.gpus)} on {event.node}"
        return {"status": "released", "was_queued": event.was_queued,
                "reason": f"{left}: {event.reason}" if event.reason else left}
    if isinstance(event, ev.AllocationPreempted):
        return {"status": "preempted", "preemptor": event.preemptor,
                "reason": event.reason or (f"preempted by {event.preemptor_namespace}/{event.preemptor_pod} "
                                           f"(priority {event.preemptor_priority} over {event.priority})")}
    if isinstance(event, ev.AllocationRejected):
        return {"status": "rejected", "code": event.code, "reason": event.reason}
    return None


async def ended_life(history: History, allocation_id: str) -> dict[str, Any] | None:
    """``{"allocation_id", "namespace", "pod", "pool", "status", "ended_at", "position", "reason", ...}``
    of the newest ended life of ``allocation_id`` (or of pod ``NAMESPACE/POD``), or None."""
    stored = await lives.events_of(history, allocation_id)
    if not stored and allocation_id.count("/") == 1:
        newest = await history.newest_of_pod(*allocation_id.split("/"))
        stored = await lives.events_of(history, newest) if newest else []
    specs: list[AllocationSpec] = [spec for s in stored if isinstance(spec := getattr(s.event, "spec", None),
                                                                     AllocationSpec)]
    if not specs:
        return None
    spec = specs[-1]
    doc: dict[str, Any] = {"allocation_id": spec.allocation_id, "namespace": spec.namespace, "pod": spec.pod,
                           "pool": spec.pool, "status": "ended", "ended_at": None, "position": None,
                           "reason": "not live; its end is not in the log's read model"}
    for item in reversed(stored):
        end = _end(item)
        if end is not None:
            doc.update(end, ended_at=item.recorded_at.isoformat(), position=item.position)
            break
    return doc


def sentence(allocation_id: str, ended: dict[str, Any] | None) -> str:
    """``allocation 'X' is not live: released at T (reason)``, or ``... was never requested``."""
    if ended is None:
        return f"allocation {allocation_id!r} is not live (no allocation has this id)"
    when = f" at {ended['ended_at']}" if ended.get("ended_at") else ""
    return f"allocation {allocation_id!r} is not live: {ended['status']}{when} ({ended['reason']})"
