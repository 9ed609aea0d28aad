"""Publishing an intent and waiting for its decision, on the allocator's own NATS connection.

One core subscription to ``gpuledger.event.>`` (made before the first publish) hands each
relayed event to the waiter of the intent id in its ``Gpuledger-Intent-Id`` header. The decision
of a request is the grant, queueing or rejection naming its allocation id (a preemption's
AllocationPreempted events and the grants of other gang members come in the same decision); of
any other intent, its first event that is not a preemption (an intent's own events precede the
queue grants it causes). Works on a standby too: every replica sees the relayed stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from events import codec, decisions, intents, subjects
from services.allocator.adapters.relay import INTENT_HEADER, POSITION_HEADER
from services.allocator.api import views
from services.shared import messaging

log = structlog.get_logger(__name__)


def decision_view(event: decisions.AnyEvent, position: int | None) -> dict[str, Any]:
    """The ``submit --json`` shape (views.outcome_view) with ``allocation_id`` filled for release
    and resize events (a resize's ``request``/``limit`` are the new ones), plus the whole event under
    ``event``."""
    view = views.outcome_view(event, position=position)
    payload = codec.to_builtins(event)
    for name in ("allocation_id", "namespace", "pod", "pool", "node"):
        if not view.get(name) and isinstance(payload.get(name), str):
            view[name] = payload[name]
    if isinstance(event, decisions.ResizeRejected | decisions.AllocationReleased | decisions.AllocationPreempted):
        view["reason"] = event.reason
    if isinstance(event, decisions.AllocationResized | decisions.ResizeRejected):  # the new (or asked) sizes
        view.update(request=views.resources_view(event.request), limit=views.resources_view(event.limit))
    if isinstance(event, decisions.ResizeRejected) and event.code in ("capacity", "quota"):
        view["max_request"] = views.resources_view(event.max_request)  # the largest per-GPU request that fits
    return {**view, "event": payload}


_REQUEST_OUTCOMES = (decisions.AllocationGranted, decisions.AllocationQueued, decisions.AllocationRejected)


def is_decision(intent: intents.AnyIntent, event: decisions.AnyEvent) -> bool:
    """Whether ``event`` (relayed under ``intent``'s id) is that intent's decision (module docstring)."""
    if isinstance(event, decisions.IntentRejected):
        return True
    if isinstance(intent, intents.RequestAllocation):
        return isinstance(event, _REQUEST_OUTCOMES) and event.spec.allocation_id == intent.spec.allocation_id
    return not isinstance(event, decisions.AllocationPreempted)


class OutcomeWaiter:
    """Waiters by intent id, fed by one subscription on ``nc`` (started by :meth:`start`)."""

    def __init__(self, nc: NATS) -> None:
        self._nc = nc
        self._waiting: dict[str, tuple[intents.AnyIntent, asyncio.Future[dict[str, Any]]]] = {}
        self._sub: Any = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Subscribe (once)."""
        async with self._lock:
            if self._sub is None:
                self._sub = await self._nc.subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>", cb=self._on_event)

    async def close(self) -> None:
        """Unsubscribe; pending waiters time out."""
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _on_event(self, msg: Msg) -> None:
        headers = msg.headers or {}
        waiting = self._waiting.get(headers.get(INTENT_HEADER, ""))
        if waiting is None or waiting[1].done():
            return
        intent, future = waiting
        try:
            event = codec.decode_event(msg.data)
            position = int(headers.get(POSITION_HEADER, "0"))
        except Exception as exc:  # not ours to judge: the relay wrote it; keep waiting
            log.warning("undecodable relayed event", error=repr(exc))
            return
        if not is_decision(intent, event):
            return
        future.set_result(decision_view(event, position))

    async def submit(self, intent: intents.AnyIntent, *, timeout_s: float) -> dict[str, Any] | None:
        """Publish ``intent`` and return its decision's view, or None when it is not decided
        within ``timeout_s`` (it stays published: the allocator decides it later)."""
        await self.start()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[intent.intent_id] = (intent, future)
        try:
            await messaging.publish_intent(self._nc.jetstream(), intent)
            try:
                return await asyncio.wait_for(asyncio.shield(future), timeout_s)
            except TimeoutError:
                return None
        finally:
            self._waiting.pop(intent.intent_id, None)
