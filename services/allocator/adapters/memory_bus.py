"""In-memory twins of the bus side of the loop: :class:`MemoryBus` (intent stream, the leader's
durable consumer, the event stream) and :class:`MemoryLeadership`.

The loop's rules (in order, rewind after a reconnect, halving a failing batch, nak the rest on a
transient failure, step down when fenced, one decision per intent) are unit-tested on these
(tests/unit/allocator/test_loop_*.py) without a server; tests/contract/test_bus.py holds the twin
and the NATS adapters to the same behaviour. What the twin keeps of JetStream's consumer
(ack policy *all*, deliver from a start sequence, ``ack_wait`` redelivery, nak with a delay,
``term``, the dedupe of ``Nats-Msg-Id``, deleted sequences) and what a test can inject:

- :meth:`MemoryBus.delete`: an operator's ``delete_msg`` (a sequence the stream no longer holds);
- :meth:`MemoryBus.lose`: the next delivery of a sequence is lost in flight (a gap in a fetch; the
  server redelivers it after ``ack_wait``);
- :meth:`MemoryBus.fail`: the next call of an operation raises the given error (ConnectionError
  is what the loop's failure classes call transient; a failed nak is lost, not raised);
- :meth:`MemoryBus.reconnect`: a NATS reconnection (the reconnect callbacks run).

One event loop, no threads. ``clock`` (monotonic seconds) decides ack-wait and nak delays, so a
test can move time by hand; waiting for a first delivery uses real time (``wait_s``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Literal

import structlog

from events import codec, intents, subjects
from services.allocator.adapters.ordering import split_in_order
from services.allocator.adapters.relay import RELAY_NAME
from services.allocator.ports import TERM, Action, Delivery, EventStore, Role, StoredEvent
from services.shared import lifecycle

log = structlog.get_logger(__name__)

Operation = Literal["rewind", "fetch", "in_order", "settle", "nak", "publish_event"]
"""A bus operation a test can make fail once (:meth:`MemoryBus.fail`)."""


class MemoryBus:
    """GPULEDGER_INTENTS with the ``allocator`` consumer, and GPULEDGER_EVENTS, in memory.

    Implements IntentSource and EventSink (and Bus: :meth:`intent_source` and :meth:`event_sink`
    return the bus itself, configured). ``stream``: seq -> Delivery still held; ``events``: the
    published events in stream order; ``ack_floor``: every sequence at or below it is settled.
    """

    def __init__(self, *, max_batch: int = 256, ack_wait_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, store: EventStore | None = None) -> None:
        self.max_batch = max_batch
        self.ack_wait_s = ack_wait_s
        self._clock = clock
        self.stream: dict[int, Delivery] = {}
        self.last_seq = 0
        self._ids: dict[str, int] = {}
        self.ack_floor = 0
        self._settled: set[int] = set()
        """Sequences above ``ack_floor`` settled one by one (terminated)."""
        self._outstanding: dict[int, float] = {}
        """Delivered, not settled: seq -> when it is redelivered (clock seconds)."""
        self._cursor: int | None = None
        """The next sequence delivered for the first time (None: not subscribed; rewind first)."""
        self._exists = False
        """Whether the durable consumer was ever created (by the first rewind)."""
        self._lost: set[int] = set()
        self._failures: dict[Operation, list[BaseException]] = {}
        self._arrived = asyncio.Event()
        self._on_reconnect: list[Callable[[], None]] = []
        self.deliveries = 0
        """Deliveries handed out by fetch (redeliveries included)."""
        self.rewinds = 0
        self.naked: list[int] = []
        """The sequence of every delivery given back with :meth:`nak`, in order."""
        # the event side
        self.store = store
        self.events: list[StoredEvent] = []
        self.offset = 0
        self.on_skip: Callable[[], object] = lambda: None
        self._buffer: list[StoredEvent] = []
        self._wake = asyncio.Event()
        self._saved = -1

    # --- Bus ---------------------------------------------------------------------------------

    def intent_source(self, *, max_batch: int, ack_wait_s: float, flush_s: float) -> MemoryBus:
        """This bus as the leader's consumer, with ``max_batch`` per fetch and ``ack_wait_s``
        (``flush_s`` has no meaning in memory)."""
        self.max_batch, self.ack_wait_s = max_batch, ack_wait_s
        return self

    def event_sink(self, store: EventStore) -> MemoryBus:
        """This bus as the relay of ``store``'s log."""
        self.store = store
        return self

    async def publish(self, intent: intents.AnyIntent) -> int:
        """Publish ``intent`` as a producer does (``Nats-Msg-Id`` = its id); returns its sequence
        (a duplicate id returns the original's, as JetStream's dedupe window does)."""
        return self.publish_raw(codec.encode(intent), subject=subjects.intent_subject(codec.tag_of(intent)),
                                msg_id=intent.intent_id)

    def publish_raw(self, data: bytes, *, subject: str = subjects.intent_subject("request_allocation"),
                    msg_id: str = "") -> int:
        """Publish any payload (a poison message); returns its stream sequence."""
        if msg_id and msg_id in self._ids:
            return self._ids[msg_id]
        self.last_seq += 1
        self.stream[self.last_seq] = Delivery(stream_seq=self.last_seq, subject=subject, data=data, msg_id=msg_id)
        if msg_id:
            self._ids[msg_id] = self.last_seq
        self._arrived.set()
        return self.last_seq

    @property
    def in_flight(self) -> set[int]:
        """Sequences delivered (or lost in flight) and not settled yet."""
        return set(self._outstanding)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on each :meth:`reconnect`."""
        self._on_reconnect.append(callback)

    # --- what a test injects -----------------------------------------------------------------

    def delete(self, seq: int) -> None:
        """Remove sequence ``seq`` from the stream (an operator's ``delete_msg``)."""
        self.stream.pop(seq, None)
        self._outstanding.pop(seq, None)

    def lose(self, seq: int) -> None:
        """The next delivery of ``seq`` is lost in flight: counted delivered, never handed over
        (it comes again after ``ack_wait_s`` or a rewind)."""
        self._lost.add(seq)

    def fail(self, operation: Operation, error: BaseException, *, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` raise ``error`` (and do nothing else)."""
        self._failures.setdefault(operation, []).extend([error] * times)

    def reconnect(self) -> None:
        """A reconnection to the server: the reconnect callbacks run."""
        for callback in self._on_reconnect:
            callback()

    def _maybe_fail(self, operation: Operation) -> None:
        queued = self._failures.get(operation)
        if queued:
            raise queued.pop(0)

    # --- IntentSource ------------------------------------------------------------------------

    async def rewind(self) -> int:
        """Deliver from ``ack_floor + 1`` again, dropping what was outstanding; returns that sequence."""
        self._maybe_fail("rewind")
        self.rewinds += 1
        self._exists = True
        self._outstanding.clear()
        self._cursor = self.ack_floor + 1
        return self._cursor

    async def fetch(self, *, wait_s: float) -> list[Delivery]:
        """Due redeliveries first (by sequence), then new sequences, up to ``max_batch``; waits up to
        ``wait_s`` real seconds for one. Raises RuntimeError before :meth:`rewind`."""
        self._maybe_fail("fetch")
        if self._cursor is None:
            raise RuntimeError("MemoryBus.fetch before rewind")
        taken = self._take()
        if not taken and wait_s > 0:
            self._arrived.clear()
            await lifecycle.wait_event(self._arrived, wait_s)
            if self._cursor is None:  # closed meanwhile
                return []
            taken = self._take()
        return taken

    def _take(self) -> list[Delivery]:
        now = self._clock()
        due = sorted(seq for seq, at in self._outstanding.items() if at <= now)
        fresh: list[int] = []
        assert self._cursor is not None
        while self._cursor <= self.last_seq and len(due) + len(fresh) < self.max_batch:
            if self._cursor in self.stream and self._cursor > self.ack_floor and self._cursor not in self._settled:
                fresh.append(self._cursor)
            self._cursor += 1
        out: list[Delivery] = []
        for seq in [*due, *fresh][: self.max_batch]:
            self._outstanding[seq] = now + self.ack_wait_s
            if seq in self._lost:
                self._lost.discard(seq)
                continue
            out.append(self.stream[seq])
        self.deliveries += len(out)
        return out

    async def in_order(self, deliveries: Sequence[Delivery],
                       expected: int) -> tuple[list[Delivery], list[Delivery], int]:
        """The shared in-order rule (:func:`services.allocator.adapters.ordering.split_in_order`)."""
        self._maybe_fail("in_order")
        return await split_in_order(deliveries, expected, ack_late=self._ack_late, deleted=self._deleted)

    async def _ack_late(self, delivery: Delivery) -> None:
        self._ack(delivery.stream_seq)

    async def _deleted(self, first: int, last: int) -> bool:
        return not any(seq in self.stream for seq in range(first, last + 1))

    async def settle(self, deliveries: Sequence[Delivery], actions: Sequence[Action]) -> None:
        """Terminate the ``term`` deliveries, ack (all up to) the last ``ack`` one."""
        self._maybe_fail("settle")
        last = 0
        for delivery, action in zip(deliveries, actions, strict=True):
            if action == TERM:
                self._settled.add(delivery.stream_seq)
                self._outstanding.pop(delivery.stream_seq, None)
            else:
                last = max(last, delivery.stream_seq)
        if last:
            self._ack(last)
        self._advance_floor()

    def _ack(self, seq: int) -> None:
        """Ack policy all: ``seq`` and everything below it is settled."""
        self.ack_floor = max(self.ack_floor, seq)
        for pending in [s for s in self._outstanding if s <= seq]:
            del self._outstanding[pending]
        self._advance_floor()

    def _advance_floor(self) -> None:
        self._settled = {seq for seq in self._settled if seq > self.ack_floor}
        while self.ack_floor + 1 in self._settled:
            self.ack_floor += 1
            self._settled.discard(self.ack_floor)

    async def nak(self, deliveries: Sequence[Delivery], *, delay_s: float) -> None:
        """Redeliver each (still outstanding) delivery once ``delay_s`` clock seconds have passed; an
        injected ``nak`` failure loses the nak instead of raising (the port's nak never raises)."""
        try:
            self._maybe_fail("nak")
        except Exception as exc:  # best effort, as on NATS: the nak is lost, the ack wait or a rewind redelivers
            log.debug("nak failed", error=repr(exc))
            return
        at = self._clock() + delay_s
        for delivery in deliveries:
            self.naked.append(delivery.stream_seq)
            if delivery.stream_seq in self._outstanding:
                self._outstanding[delivery.stream_seq] = at

    async def pending(self) -> int:
        """Sequences in the stream above the ack floor not settled yet (0 before the first rewind
        created the consumer)."""
        if not self._exists:
            return 0
        return sum(1 for seq in self.stream if seq > self.ack_floor and seq not in self._settled)

    async def close(self) -> None:
        """Unsubscribe: fetch refuses until the next :meth:`rewind`; outstanding deliveries stay
        (the server redelivers them after ``ack_wait_s``)."""
        self._cursor = None
        self._arrived.set()

    # --- EventSink ---------------------------------------------------------------------------

    def _bound_store(self) -> EventStore:
        if self.store is None:
            raise RuntimeError("MemoryBus: no event store (call event_sink(store) first)")
        return self.store

    async def resume(self) -> int:
        """``offset`` from the recorded relay position (0 when the stream never held an event),
        never beyond the log; returns it."""
        store = self._bound_store()
        recorded = await store.relay_position(RELAY_NAME) if self.events else 0
        self.offset = min(recorded or 0, await store.last_position())
        self._saved = -1
        return self.offset

    def offer(self, stored: Sequence[StoredEvent]) -> None:
        """Queue committed events for publishing."""
        self._buffer.extend(stored)
        self._wake.set()

    async def run(self, stop: asyncio.Event, *, idle_s: float = 1.0) -> None:
        """Publish on each offer, and every ``idle_s`` to close a gap from the log, until ``stop``."""
        while not stop.is_set():
            await lifecycle.wait_event(self._wake, idle_s)
            self._wake.clear()
            await self.sync()

    async def sync(self) -> int:
        """Publish everything committed after ``offset`` (buffer, else the log); returns the count.
        An injected ``publish_event`` failure leaves ``offset`` where it was (retried later)."""
        store = self._bound_store()
        published = 0
        try:
            while True:
                self._buffer = [event for event in self._buffer if event.position > self.offset]
                if self._buffer and self._buffer[0].position == self.offset + 1:
                    batch, self._buffer = self._buffer, []
                else:
                    batch = [event async for event in store.read(after=self.offset, limit=2048)]
                if not batch:
                    break
                for stored in batch:
                    self._maybe_fail("publish_event")
                    if not self.events or stored.position > self.events[-1].position:  # msg-id dedupe
                        self.events.append(stored)
                    self.offset = stored.position
                    published += 1
        except Exception as exc:  # like the NATS relay: the next round retries from offset
            log.warning("relay publish failed; will retry", offset=self.offset, error=repr(exc))
        if self.offset != self._saved:
            await store.save_relay_position(RELAY_NAME, self.offset)
            self._saved = self.offset
        return published


class MemoryLeadership:
    """A Leadership a test grants and revokes by hand (no renewal, no clock).

    ``grant(epoch)`` makes this replica leader with ``epoch`` (take the same epoch in the
    in-memory lease store, so appends are fenced by it); :meth:`step_down` (the loop, on a fenced
    append) and :meth:`revoke` make it standby. ``steps_down`` counts the loop's step-downs.
    """

    def __init__(self, holder: str = "memory", *, epoch: int = 0) -> None:
        self.holder = holder
        self.changed = asyncio.Event()
        self._epoch = epoch
        self.steps_down = 0
        self.released = False

    @property
    def is_leader(self) -> bool:
        """True after :meth:`grant` until a step-down, revoke or release."""
        return self._epoch > 0

    @property
    def epoch(self) -> int:
        """The granted epoch (0 when standby)."""
        return self._epoch

    @property
    def role(self) -> Role:
        """``leader`` or ``standby``."""
        return "leader" if self.is_leader else "standby"

    def grant(self, epoch: int) -> None:
        """Lead with ``epoch`` (>= 1)."""
        if epoch < 1:
            raise ValueError(f"epoch must be >= 1, got {epoch}")
        self._epoch = epoch
        self.changed.set()

    def revoke(self) -> None:
        """Become standby (as when the lease could not be renewed)."""
        self._epoch = 0
        self.changed.set()

    def step_down(self) -> None:
        """The loop saw a fenced append: standby until granted again."""
        self.steps_down += 1
        self.revoke()

    async def run(self, stop: asyncio.Event) -> None:
        """Nothing to renew: wait for ``stop``."""
        await stop.wait()

    async def release(self) -> None:
        """Hand leadership over (clean shutdown)."""
        self.released = True
        self._epoch = 0
