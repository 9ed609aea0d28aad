"""The relay: publishes committed events to GPULEDGER_EVENTS, in log order, with no gap and no double.

Each event goes to ``gpuledger.event.<tag>`` with ``Nats-Msg-Id`` = its log position and headers
``Gpuledger-Position`` and ``Gpuledger-Intent-Id``. The relay's offset is the position of the last
message in GPULEDGER_EVENTS (read back at :meth:`resume`), so after any crash it continues right
after what NATS already holds; JetStream's dedupe window drops a re-publish inside the window.
The allocator hands it each commit's events (:meth:`offer`); anything not contiguous with the
offset (a commit made while NATS was down, a new leader's first batch) is read from the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from events import codec, subjects
from services.allocator.ports import EventStore, StoredEvent
from services.shared import lifecycle

log = structlog.get_logger(__name__)

POSITION_HEADER = "Gpuledger-Position"
INTENT_HEADER = "Gpuledger-Intent-Id"


def headers_of(stored: StoredEvent) -> dict[str, str]:
    """NATS headers of a published event: msg id and position (decimal), the deciding intent id."""
    position = str(stored.position)
    return {"Nats-Msg-Id": position, POSITION_HEADER: position, INTENT_HEADER: stored.intent_id}


class EventRelay:
    """Publishes the log to GPULEDGER_EVENTS. ``offset``: last position known to be in NATS.

    ``read_chunk``: events read from the store per catch-up round.
    """

    def __init__(self, nc: NATS, store: EventStore, *, read_chunk: int = 2048) -> None:
        self._js = nc.jetstream()
        self._store = store
        self._read_chunk = read_chunk
        self._buffer: list[StoredEvent] = []
        self._wake = asyncio.Event()
        self.offset = 0

    async def resume(self) -> int:
        """Set ``offset`` from the last message of GPULEDGER_EVENTS (0 when empty); returns it."""
        info = await self._js.stream_info(subjects.EVENT_STREAM)
        last_seq = int(info.state.last_seq or 0)
        self.offset = 0
        if last_seq:
            try:
                msg = await self._js.get_msg(subjects.EVENT_STREAM, last_seq)
            except NotFoundError:
                msg = None
            if msg is not None and msg.headers:
                self.offset = int(msg.headers.get("Nats-Msg-Id", "0"))
        log.info("relay resumed", offset=self.offset)
        return self.offset

    def offer(self, stored: Sequence[StoredEvent]) -> None:
        """Queue freshly committed events for publishing (never blocks)."""
        self._buffer.extend(stored)
        self._wake.set()

    async def run(self, stop: asyncio.Event, *, idle_s: float = 1.0) -> None:
        """Publish until ``stop`` is set or cancelled: on each offer, or every ``idle_s`` to close any gap."""
        while not stop.is_set():
            await lifecycle.wait_event(self._wake, idle_s)
            self._wake.clear()
            await self.sync()

    async def sync(self) -> int:
        """Publish everything committed after ``offset`` (buffer, else the log); returns the count.

        A NATS error is logged and leaves ``offset`` at the last acknowledged event (retried later).
        """
        published = 0
        try:
            while True:
                batch = self._take_contiguous() or await self._read_gap()
                if not batch:
                    return published
                await self._publish(batch)
                published += len(batch)
        except Exception as exc:  # NATS down or DB down: the next round retries from offset
            log.warning("relay publish failed; will retry", offset=self.offset, error=repr(exc))
            return published

    def _take_contiguous(self) -> list[StoredEvent]:
        self._buffer = [event for event in self._buffer if event.position > self.offset]
        if not self._buffer or self._buffer[0].position != self.offset + 1:
            return []
        batch, self._buffer = self._buffer, []
        return batch

    async def _read_gap(self) -> list[StoredEvent]:
        return [event async for event in self._store.read(after=self.offset, limit=self._read_chunk)]

    async def _publish(self, batch: Sequence[StoredEvent]) -> None:
        futures = []
        for stored in batch:
            subject = subjects.event_subject(codec.tag_of(stored.event))
            futures.append(await self._js.publish_async(subject, codec.encode(stored.event),
                                                        headers=headers_of(stored)))
        for stored, future in zip(batch, futures, strict=True):
            async with asyncio.timeout(10.0):
                await future
            self.offset = stored.position
