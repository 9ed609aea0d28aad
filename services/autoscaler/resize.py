"""Turning a recommendation into ResizeAllocation intents, and answering ResizeRejected.

Per worker (allocation), TensorFusion's ``ApplyRecommendationToWorkload``
(``internal/autoscaler/workload/handler.go``) over the bus: one resize in flight at a time; a worker
already at the target is skipped; resources that are not targeted keep the worker's current values
(fixes upstream sending both). On ResizeRejected the request is capped at the allocator's
``max_request`` and the per-worker headroom ((available + own request) / own workers) and retried;
each retry strictly lowers the request and at most ``max_retries`` happen, after which the worker
waits ``retry_after`` before the same target is tried again. Never a loop.
Pure: ids and time are passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import msgspec

from events import decisions, intents
from events.values import Resources
from services.autoscaler.recommendation import RequestLimit
from services.autoscaler.view import Worker

NewId = Callable[[], str]


class Attempt(msgspec.Struct, kw_only=True):
    """A worker's resize in progress: the target, the retries used and the intent in flight."""

    target: RequestLimit
    intent_id: str = ""
    sent_at: datetime | None = None
    retries: int = 0
    in_flight: bool = True
    blocked_until: datetime | None = None


def worker_target(rec: RequestLimit, worker: Worker, *, compute: bool, vram: bool) -> RequestLimit:
    """The recommendation restricted to the targeted resources; the rest stays as the worker has it."""
    cur = worker.current
    req = Resources(milli_tflops=rec.request.milli_tflops if compute else cur.request.milli_tflops,
                    vram_bytes=rec.request.vram_bytes if vram else cur.request.vram_bytes)
    lim = Resources(milli_tflops=rec.limit.milli_tflops if compute else cur.limit.milli_tflops,
                    vram_bytes=rec.limit.vram_bytes if vram else cur.limit.vram_bytes)
    return RequestLimit(request=req, limit=lim)


class ResizeTracker:
    """Resize attempts by allocation id; builds intents and decides retries."""

    def __init__(self, *, new_id: NewId, max_retries: int = 2, retry_after: timedelta = timedelta(minutes=5)) -> None:
        self.new_id = new_id
        self.max_retries = max_retries
        self.retry_after = retry_after
        self.attempts: dict[str, Attempt] = {}

    def apply(self, worker: Worker, target: RequestLimit, *, now: datetime) -> intents.ResizeAllocation | None:
        """The intent that moves ``worker`` to ``target``, or None (already there, in flight, blocked)."""
        allocation_id = worker.spec.allocation_id
        if worker.current == target:
            self.attempts.pop(allocation_id, None)
            return None
        attempt = self.attempts.get(allocation_id)
        if attempt is not None and attempt.in_flight and not self._stale(attempt, now):
            return None
        if (attempt is not None and attempt.target == target and attempt.blocked_until is not None
                and now < attempt.blocked_until):
            return None
        attempt = Attempt(target=target)
        self.attempts[allocation_id] = attempt
        return self._intent(worker, target, attempt, now)

    def _stale(self, attempt: Attempt, now: datetime) -> bool:
        """An answer that never came (lost intent): resend after ``retry_after``."""
        return attempt.sent_at is not None and now - attempt.sent_at >= self.retry_after

    def _intent(self, worker: Worker, target: RequestLimit, attempt: Attempt,
                now: datetime) -> intents.ResizeAllocation:
        attempt.intent_id, attempt.sent_at, attempt.in_flight = self.new_id(), now, True
        return intents.ResizeAllocation(intent_id=attempt.intent_id, allocation_id=worker.spec.allocation_id,
                                        request=target.request, limit=target.limit, pool=worker.spec.pool)

    def on_intent_rejected(self, event: decisions.IntentRejected, *, now: datetime) -> None:
        """The allocator refused one of our intents as invalid: block that target for ``retry_after``."""
        for attempt in self.attempts.values():
            if attempt.intent_id == event.intent_id:
                attempt.in_flight = False
                attempt.blocked_until = now + self.retry_after

    def on_resized(self, event: decisions.AllocationResized) -> None:
        """The allocator applied a resize: the worker is done."""
        self.attempts.pop(event.allocation_id, None)

    def on_rejected(self, event: decisions.ResizeRejected, *, worker: Worker | None, headroom: Resources | None,
                    now: datetime) -> intents.ResizeAllocation | None:
        """A capped retry, or None when retries are spent or the cap cannot lower the request.

        ``headroom`` is the view's per-worker max allowed (None: unknown). The original target is
        kept for the block, so the next evaluation does not resend it before ``retry_after``.
        """
        attempt = self.attempts.get(event.allocation_id)
        if attempt is None or worker is None:
            return None
        attempt.in_flight = False
        capped = _capped(event, worker=worker, headroom=headroom)
        if attempt.retries >= self.max_retries or capped is None or capped == event.request:
            attempt.blocked_until = now + self.retry_after
            return None
        attempt.retries += 1
        return self._intent(worker, RequestLimit(request=capped, limit=event.limit), attempt, now)


def _capped(event: decisions.ResizeRejected, *, worker: Worker, headroom: Resources | None) -> Resources | None:
    """The rejected request with each growing dimension capped; None when nothing can grow."""
    cur, asked, most = worker.current.request, event.request, event.max_request

    def cap(field: str) -> int:
        old, new = int(getattr(cur, field)), int(getattr(asked, field))
        if new <= old:
            return new
        limit = min(int(getattr(most, field)) or new, int(getattr(headroom, field)) if headroom else new)
        return max(old, min(new, limit))

    capped = Resources(milli_tflops=cap("milli_tflops"), vram_bytes=cap("vram_bytes"))
    return None if capped == cur else capped
