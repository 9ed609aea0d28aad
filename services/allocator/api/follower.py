"""The reader's own projection: it follows the event log by position, apart from the writer.

A reader process (``gpuledger api``) answers the HTTP API and the dashboard from a
:class:`Follower`: it loads the newest snapshot plus the events after it
(``EventStore.load_state``), then polls ``events WHERE position > applied`` every ``poll_s``
seconds and folds what came with the domain's ``evolve``, in slices of at most
:data:`SLICE_EVENTS` events with a yield to the event loop between them, so a reader that starts
far behind still answers. The log is gapless and in commit order (the writer assigns positions
under its append lock), so folding by position gives exactly the writer's projection at the same
position (the same fold the writer's standbys run). ``lag`` = the newest log position seen minus
the position applied; ``/readyz`` and ``gpuledger_reader_lag_events`` report it. Each applied slice
goes to ``listeners`` (the reason keeper); ``steps`` are called before each event is folded, with
the projection as it is then (the dashboard's placement-quality series samples there).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from services.allocator import domain
from services.allocator.domain.state import ClusterState
from services.allocator.ports import EventStore, StoredEvent
from services.shared import lifecycle

log = structlog.get_logger(__name__)

SLICE_EVENTS = 500
"""Events folded between two yields to the event loop."""
MAX_BACKOFF_S = 5.0
"""Longest wait after a failed read before the next try (doubling from ``poll_s``)."""

Listener = Callable[[Sequence[StoredEvent]], None]
Step = Callable[[ClusterState, StoredEvent], None]
"""Called with the projection at ``event.position - 1`` just before ``event`` is folded into it;
it must not change the projection nor keep a reference to it (it changes in place). A step that
raises is logged and removed."""


class Follower:
    """A projection that follows ``store``'s log by position (module docstring).

    ``state``: the projection (``state.position`` = the last position applied); ``head``: the
    newest log position seen; ``loaded``: set once the first load finished; ``poll_s``: seconds
    between two polls when nothing new came (> 0)."""

    def __init__(self, store: EventStore, *, poll_s: float = 0.05) -> None:
        if poll_s <= 0:
            raise ValueError(f"poll_s must be > 0 seconds, got {poll_s}")
        self.store = store
        self.poll_s = poll_s
        self.state = ClusterState.empty()
        self.head = 0
        self.loaded = asyncio.Event()
        self.listeners: list[Listener] = []
        self.steps: list[Step] = []
        self.failed_since: float | None = None
        """Monotonic time of the first failed read of the current outage (None while reads succeed)."""
        self._moved = asyncio.Event()
        self.heap = lifecycle.HeapKeeper()
        """Settled once the projection is loaded, tended after each catch-up (full collections stay short)."""

    @property
    def lag(self) -> int:
        """Log events not yet applied (newest position seen minus position applied, >= 0)."""
        return max(0, self.head - self.state.position)

    async def run(self, stop: asyncio.Event) -> None:
        """Load, then follow until ``stop``; read errors are logged and retried with back-off."""
        delay = self.poll_s
        while not stop.is_set():
            try:
                if not self.loaded.is_set():
                    await self._load()
                moved = await self.catch_up()
                self.heap.tend()
            except Exception as exc:  # database down or an undecodable row: stay behind, retry
                if self.failed_since is None:
                    self.failed_since = time.monotonic()
                    log.warning("following the log failed; retrying", error=repr(exc)[:512])
                delay = min(MAX_BACKOFF_S, delay * 2)
                await lifecycle.wait_event(stop, delay)
                continue
            self.failed_since, delay = None, self.poll_s
            if not moved:
                await lifecycle.wait_event(stop, self.poll_s)

    async def _load(self) -> None:
        self.state = await self.store.load_state()
        self.head = max(self.head, self.state.position)
        self.heap.settle()
        self.loaded.set()
        log.info("reader projection loaded", position=self.state.position)

    async def catch_up(self) -> int:
        """Fold every event after the applied position up to the head read now; returns how many."""
        self.head = max(self.head, await self.store.last_position())
        folded = 0
        while self.state.position < self.head:
            batch = [stored async for stored in self.store.read(after=self.state.position, limit=SLICE_EVENTS)]
            if not batch:
                break
            state = self.state
            for stored in batch:
                for step in self.steps:
                    try:
                        step(state, stored)
                    except Exception:  # a broken step must not stop the projection: drop it, say so once
                        log.exception("a step listener of the reader's projection failed; removed")
                        self.steps = [s for s in self.steps if s is not step]
                state = domain.evolve(state, stored.event)
                state.position = stored.position
            self.state = state
            folded += len(batch)
            for listener in self.listeners:
                try:
                    listener(batch)
                except Exception:
                    log.exception("a listener of the reader's projection failed")
            self._moved.set()
            self._moved = asyncio.Event()
            await asyncio.sleep(0)
        return folded

    async def wait_for(self, position: int, *, timeout_s: float) -> bool:
        """Wait until ``position`` is applied (a write's own event: read-your-writes on this
        reader); False when it is not within ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while self.state.position < position:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await lifecycle.wait_event(self._moved, left)
        return True
