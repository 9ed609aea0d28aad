"""Keeps the current reason of every queued request, in the reader, and in the read model
(``allocations.reason``).

The reader's :class:`~services.allocator.api.follower.Follower` calls :meth:`ReasonKeeper.note`
with each slice of events it applies; the keeper marks the pools and namespaces whose queued
requests that slice may re-explain (:func:`services.allocator.api.reasons.dirty_scope`) and, in its
own task, recomputes those reasons from the reader's projection and writes the ones that changed to
the read model through the History port, outside the log (no event per change, so a waiting request
does not flood the log). Each write is fenced by the position the reasons were computed at (a row a
newer event changed is left alone), so several readers may write side by side and none of them
overwrites a newer row. The first round, and each after the projection is reloaded, recomputes
and writes every queued request. Cost: one ``decide`` per queued request in the touched
pools/namespaces (a filter pass over its pool's nodes, BENCHMARKS.md "Current reasons"). A round
computes for at most :data:`ROUND_S` seconds, yielding to the event loop every :data:`SLICE_S`, and
rounds start at least :data:`MIN_INTERVAL_S` apart (what is left waits, in grant order, for the next
round); one UPDATE per round for the rows that changed. This runs in the reader process: the writer
never computes a reason outside a decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from services.allocator.api import reasons
from services.allocator.api.follower import Follower
from services.allocator.ports import History, StoredEvent
from services.shared import lifecycle

log = structlog.get_logger(__name__)

SLICE_S = 0.005
"""Computing time between two yields to the event loop."""
ROUND_S = 0.025
"""Computing time of one round at most (one reason is always computed)."""
MIN_INTERVAL_S = 0.5
"""Least time between the starts of two rounds."""

ReasonRows = dict[str, tuple[str, str, str]]


class ReasonKeeper:
    """Current reasons of queued requests: ``cache`` (allocation id -> Reason) as of ``position``
    (what the API serves when it matches the projection), written to the read model by ``run``."""

    def __init__(self, follower: Follower, history: History) -> None:
        self._follower = follower
        self._history = history
        self._scope = reasons.Scope(everything=True)
        self._wake = asyncio.Event()
        self._written: ReasonRows = {}
        self._pending: dict[str, None] = {}  # allocation ids to recompute, in grant order
        self._session: int | None = None
        self.cache: dict[str, reasons.Reason] = {}
        self.position = -1
        self.explainer = reasons.explainer()
        """The reader's one explaining Scheduler: it follows the projection's changes between rounds, and
        the handlers (why, simulate, the queue) use it too, so each answer costs what changed since."""

    def note(self, stored: Sequence[StoredEvent]) -> None:
        """Commit listener: mark what ``stored`` may have re-explained and wake the task."""
        self._scope.merge(reasons.dirty_scope(s.event for s in stored))
        self._wake.set()

    def lookup(self, allocation_id: str) -> reasons.Reason | None:
        """The cached current reason when the cache is as new as the projection, else None."""
        if self.position != self._follower.state.position or self._pending:
            return None
        if self._scope.everything or self._scope.pools or self._scope.namespaces:
            return None
        return self.cache.get(allocation_id)

    async def run(self, stop: asyncio.Event, *, idle_s: float = 1.0) -> None:
        """Refresh after each commit (or every ``idle_s``) until ``stop``; errors are logged and retried."""
        while not stop.is_set():
            await lifecycle.wait_event(self._wake, idle_s)
            self._wake.clear()
            started = time.monotonic()
            try:
                await self.refresh()
            except Exception as exc:  # the read model is behind until the next round
                log.warning("writing current reasons failed; will retry", error=repr(exc))
                self._scope.everything = True
            if self._pending:
                self._wake.set()
            await asyncio.sleep(max(0.0, MIN_INTERVAL_S - (time.monotonic() - started)))

    async def refresh(self) -> int:
        """One round: recompute the dirty reasons, write those that changed; returns how many rows
        were written (0 before the projection is loaded)."""
        follower = self._follower
        if not follower.loaded.is_set():
            return 0
        session = id(follower.state)
        if session != self._session:  # first round or reloaded projection: the rows may be anything
            self._session, self._written, self._pending = session, {}, {}
            self._scope, self.cache = reasons.Scope(everything=True), {}
        scope, self._scope = self._scope, reasons.Scope(pools=set(), namespaces=set())
        position = follower.state.position
        queued = reasons.queued(follower.state, self.explainer)
        self._pending.update((a.spec.allocation_id, None) for a in queued if scope.covers(a.spec))
        fresh = await self._compute()
        live = {a.spec.allocation_id for a in reasons.queued(follower.state)}
        self.cache = {k: v for k, v in {**self.cache, **fresh}.items() if k in live}
        self._written = {k: v for k, v in self._written.items() if k in live}
        changed = {k: r.row() for k, r in fresh.items() if self._written.get(k) != r.row()}
        self.position = position
        if not changed:
            return 0
        written = await self._history.write_reasons(changed, position=position)  # the oldest they saw
        self._written.update(changed)
        return written

    async def _compute(self) -> dict[str, reasons.Reason]:
        """Reasons of pending ids, in grant order, for at most ROUND_S of computing."""
        out: dict[str, reasons.Reason] = {}
        spent, slice_start = 0.0, time.monotonic()
        while self._pending and (not out or spent < ROUND_S):
            allocation_id = next(iter(self._pending))
            del self._pending[allocation_id]
            state = self._follower.state
            live = state.allocations.get(allocation_id)
            if live is not None and live.status == "queued":
                out[allocation_id] = reasons.current(state, live.spec, self.explainer)
            if (elapsed := time.monotonic() - slice_start) >= SLICE_S:
                spent += elapsed
                await asyncio.sleep(0)
                slice_start = time.monotonic()
        return out
