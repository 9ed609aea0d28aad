"""The leader's liveness tick: CheckHeartbeats published only when a node's heartbeat expired, a
waiting gang's timeout ran out, a defrag campaign's deadline or reservation expired, or a
time-based block ended in a pool with queued requests (an eviction protection, a reclaim minimum
runtime or rate window: domain/unblocked.py; the decision retries those pools' queues); and the
StartDefrag of each pool whose defrag schedule is due (domain.defrag_campaign.scheduled; its
intent id names the pool and the cron tick, so the bus deduplicates a tick published twice).

TensorFusion marks a node lost when its heartbeat is older than its TTL. The allocator decides that
from a ``CheckHeartbeats`` intent (so the decision is in the log), but publishes one only when
its projection shows a Ready node whose heartbeat expired, or a gang whose quorum was not placed
within its timeout (the same intent releases its waiting members: domain.gang): an idle cluster
logs nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from events import intents
from services.allocator.domain.defrag_campaign import due as defrag_due
from services.allocator.domain.defrag_campaign import scheduled as defrag_scheduled
from services.allocator.domain.gang import expired as expired_gangs
from services.allocator.domain.inventory import expired_nodes
from services.allocator.domain.state import ClusterState
from services.allocator.domain.unblocked import pools as unblocked_pools
from services.shared import lifecycle

log = structlog.get_logger(__name__)


async def check_heartbeats(stop: asyncio.Event, *, period_s: float, is_leader: Callable[[], bool],
                           state: Callable[[], ClusterState], now: Callable[[], datetime],
                           publish: Callable[[intents.AnyIntent], Awaitable[object]]) -> None:
    """Every ``period_s`` (0 disables) until ``stop``, while ``is_leader()``: publish the StartDefrag
    of every pool whose schedule is due, and a CheckHeartbeats when ``state()`` has an expired node,
    gang or defrag campaign at ``now()``, or a pool whose queue a time-based block's end may unblock
    (errors are logged; the next tick retries)."""
    if period_s <= 0:
        return
    while not await lifecycle.wait_event(stop, period_s):
        if not is_leader():
            continue
        for start in defrag_scheduled(state(), now()):
            try:
                await publish(start)
            except Exception as exc:
                log.warning("publishing a scheduled StartDefrag failed", pool=start.pool, error=repr(exc))
        if not due(state(), now()):
            continue
        try:
            await publish(intents.CheckHeartbeats(intent_id=f"check-heartbeats-{uuid.uuid4()}"))
        except Exception as exc:
            log.warning("publishing CheckHeartbeats failed", error=repr(exc))


def due(state: ClusterState, now: datetime) -> bool:
    """Whether a CheckHeartbeats has something to decide at ``now``: an expired node, gang or defrag
    campaign, or a pool whose time-based blocks ended since the last check (domain/unblocked.py)."""
    return bool(expired_nodes(state, now) or expired_gangs(state, now) or defrag_due(state, now)
                or unblocked_pools(state, now))
