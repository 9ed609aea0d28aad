"""The last report per node and the heartbeat loop that re-sends it.

Every source keeps its current ``RegisterNode`` per node in an :class:`Inventory`; the loop
re-publishes each one every ``interval_s`` with a fresh intent id (so the allocator decides it
and renews the node's ``heartbeat_ttl_s``). A node whose source stops reporting is therefore
marked Lost by the allocator within its TTL; its GPUs leave the candidate set until the next
report. The TTL should be a few intervals (default 3x) so one lost message is tolerated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog

from events.base import Intent
from events.intents import RegisterNode
from services.discovery.inventory import fresh_id

log = structlog.get_logger(__name__)

Publish = Callable[[Intent], Awaitable[Any]]
"""Sends one intent (production: ``messaging.publish_intent`` on JetStream; tests: a list append)."""


class Inventory:
    """Current report per node name (what a heartbeat re-sends)."""

    def __init__(self) -> None:
        self._reports: dict[str, RegisterNode] = {}

    def get(self, node: str) -> RegisterNode | None:
        """The last report of ``node``, or None."""
        return self._reports.get(node)

    def put(self, report: RegisterNode) -> None:
        """Remember ``report`` as the node's current state."""
        self._reports[report.node] = report

    def remove(self, node: str) -> None:
        """Forget ``node`` (no more heartbeats for it)."""
        self._reports.pop(node, None)

    def reports(self) -> list[RegisterNode]:
        """All current reports, by node name."""
        return [self._reports[n] for n in sorted(self._reports)]


async def beat_once(inventory: Inventory, publish: Publish) -> int:
    """Re-publish every current report with a fresh intent id; returns how many were sent."""
    reports = inventory.reports()
    for report in reports:
        await publish(msgspec.structs.replace(report, intent_id=fresh_id(report)))
    return len(reports)


async def heartbeat_loop(inventory: Inventory, publish: Publish, *, interval_s: float,
                         refresh: Callable[[], Awaitable[None]] | None = None) -> None:
    """Forever: wait ``interval_s``, run ``refresh`` (re-read the source, e.g. NVML), then beat.

    A failing publish or refresh is logged and retried at the next interval (never raises,
    except cancellation). ``interval_s`` must be > 0.
    """
    if interval_s <= 0:
        raise ValueError(f"heartbeat interval_s must be > 0, got {interval_s}")
    while True:
        await asyncio.sleep(interval_s)
        try:
            if refresh is not None:
                await refresh()
            sent = await beat_once(inventory, publish)
            log.debug("heartbeat sent", nodes=sent)
        except Exception as exc:  # keep beating: the next interval retries
            log.warning("heartbeat failed; retrying next interval", error=repr(exc))
