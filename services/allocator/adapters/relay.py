"""The relay: publishes committed events to GPULEDGER_EVENTS, in log order, with no gap and no double.

Each event goes to ``gpuledger.event.<tag>`` with ``Nats-Msg-Id`` = its log position and headers
``Gpuledger-Position`` and ``Gpuledger-Intent-Id``. The relay keeps its own offset in the event
store (``relay_position``, written after each acknowledged batch) and resumes from it, so nothing
another client writes to GPULEDGER_EVENTS (a forged or huge ``Nats-Msg-Id``, a message without
headers) can move it; a stream that never held a message (a new NATS store) gets the whole log
again. Only where no position was ever recorded (a log from before the ``relay_position`` table)
does it derive one from the stream's last message, and only when that
message is exactly the log's event at the position it claims. JetStream's dedupe window drops a
re-publish inside the window. An event larger than the server's maximum payload is skipped with
an error log line and ``on_skip`` (a metric); the contract's bounds keep events far below it.
The allocator hands the relay each commit's events (:meth:`offer`); anything not contiguous with
the offset (a commit made while NATS was down, a new leader's first batch) is read from the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog
from nats.aio.client import Client as NATS
from nats.js.api import PubAck
from nats.js.errors import NotFoundError

from events import codec, subjects
from services.allocator.ports import CorruptEventError, EventStore, StoredEvent
from services.shared import lifecycle

log = structlog.get_logger(__name__)

RELAY_NAME = "events"
"""The ``relay_position`` row of the GPULEDGER_EVENTS relay."""
HEADER_OVERHEAD = 64
"""Bytes of a message's header block besides its keys and values (status line, separators)."""
POSITION_HEADER = "Gpuledger-Position"
INTENT_HEADER = "Gpuledger-Intent-Id"


def headers_of(stored: StoredEvent) -> dict[str, str]:
    """NATS headers of a published event: msg id and position (decimal), the deciding intent id."""
    position = str(stored.position)
    return {"Nats-Msg-Id": position, POSITION_HEADER: position, INTENT_HEADER: stored.intent_id}


class EventRelay:
    """Publishes the log to GPULEDGER_EVENTS (an :class:`~services.allocator.ports.EventSink`).
    ``offset``: last position known to be in NATS.

    ``read_chunk``: events read from the store per catch-up round; ``on_skip``: called once per
    event skipped for its size.
    """

    def __init__(self, nc: NATS, store: EventStore, *, read_chunk: int = 2048) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._store = store
        self._read_chunk = read_chunk
        self._buffer: list[StoredEvent] = []
        self._wake = asyncio.Event()
        self.offset = 0
        self._saved = 0
        self.on_skip: Callable[[], object] = lambda: None

    async def resume(self) -> int:
        """Set ``offset`` from the recorded relay position (or, when none was ever recorded, from a
        verified last message of GPULEDGER_EVENTS; else 0), never beyond the log; 0 when the stream
        never held a message (a new NATS store must get the whole log). Returns it."""
        info = await self._js.stream_info(subjects.EVENT_STREAM)
        recorded = await self._store.relay_position(RELAY_NAME)
        if not info.state.last_seq:  # a stream that never held a message (a new NATS store): all of it
            recorded = 0
        elif recorded is None:
            recorded = await self._verified_stream_position(int(info.state.last_seq))
        self.offset = min(recorded, await self._store.last_position())
        self._saved = -1  # the record is rewritten by the first sync, also when it moved back
        log.info("relay resumed", offset=self.offset)
        return self.offset

    async def _verified_stream_position(self, last_seq: int) -> int:
        """The position the stream's last message claims, if it is the log's event at that position."""
        try:
            msg = await self._js.get_msg(subjects.EVENT_STREAM, last_seq)
            claimed = (msg.headers or {}).get(POSITION_HEADER, "")
            if not (claimed.isascii() and claimed.isdigit() and 0 < len(claimed) <= 18):
                return 0
            position = int(claimed)
            stored = [event async for event in self._store.read(after=position - 1, limit=1)]
        except (NotFoundError, CorruptEventError):
            return 0
        if stored and stored[0].position == position and msg.data == codec.encode(stored[0].event):
            return position
        log.warning("last GPULEDGER_EVENTS message is not the log's event; relaying from the start",
                    claimed=claimed)
        return 0

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
                    await self._save()
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
        """Publish ``batch`` (skipping events over the payload limit), then record the offset."""
        pending: list[tuple[StoredEvent, asyncio.Future[PubAck]]] = []
        for stored in batch:
            payload = codec.encode(stored.event)
            headers = headers_of(stored)
            size = len(payload) + HEADER_OVERHEAD + sum(len(k) + len(v.encode()) + 4 for k, v in headers.items())
            if self._nc.max_payload and size > self._nc.max_payload:
                await self._settle(pending)
                pending = []
                log.error("event larger than NATS's max payload; not relayed", position=stored.position,
                          type=codec.tag_of(stored.event), size=size, max_payload=self._nc.max_payload)
                self.on_skip()
                self.offset = stored.position
                continue
            subject = subjects.event_subject(codec.tag_of(stored.event))
            pending.append((stored, await self._js.publish_async(subject, payload, headers=headers)))
        await self._settle(pending)
        await self._save()

    async def _save(self) -> None:
        if self.offset != self._saved:
            await self._store.save_relay_position(RELAY_NAME, self.offset)
            self._saved = self.offset

    async def _settle(self, pending: Sequence[tuple[StoredEvent, asyncio.Future[PubAck]]]) -> None:
        for stored, future in pending:
            async with asyncio.timeout(10.0):
                await future
            self.offset = stored.position
