"""Ports of the allocator: the event store (log + processed intents + snapshots + read models),
the lease, and the read side's History. Adapters implement them for PostgreSQL and in memory; one
contract test suite (tests/contract) runs against both. The bus side of the loop (intents in,
events out, who leads) has its own block: :class:`IntentSource`, :class:`EventSink`,
:class:`Leadership` and :class:`Bus`, implemented over NATS JetStream and by the in-memory twin
(``adapters/memory_bus.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final, Literal, Protocol

import msgspec

from events import intents
from events.decisions import AnyEvent
from services.allocator.domain.state import ClusterState

Action = Literal["ack", "term"]
"""How a decided delivery is settled after its commit."""
ACK: Final[Action] = "ack"
"""Settle a delivery as done (its outcome is in the log)."""
TERM: Final[Action] = "term"
"""Settle a delivery as never to be redelivered (poison, decided as IntentRejected)."""


class Delivery(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One message as JetStream delivered it: stream sequence, subject, payload, ``Nats-Msg-Id``."""

    stream_seq: int
    subject: str
    data: bytes
    msg_id: str = ""


class DecidedIntent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One decided intent ready to append: its id, NATS stream sequence (0 if none), its events."""

    intent_id: str
    stream_seq: int
    events: tuple[AnyEvent, ...]


class StoredEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event as the log holds it: gapless ``position`` (1-based), commit time, writer epoch."""

    position: int
    recorded_at: datetime
    epoch: int
    intent_id: str
    event: AnyEvent


class Lease(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The writer lease: who holds it, its fencing ``epoch`` and expiry (UTC)."""

    name: str
    holder: str
    epoch: int
    expires_at: datetime


class FencedError(RuntimeError):
    """The writer's lease epoch is no longer current: the append wrote nothing."""


class DuplicateIntentError(ValueError):
    """An intent of the batch was already processed (or is twice in it): the append wrote nothing.

    Callers filter with :meth:`EventStore.processed` first; this is the store's last line of defence.
    """


class CorruptEventError(RuntimeError):
    """A stored event could not be decoded; the message names its position and type."""


class EventStore(Protocol):
    """The append-only log with its processed-intent index, snapshots and read models."""

    async def append(
        self, batch: Sequence[DecidedIntent], *, lease: str, epoch: int, state: ClusterState
    ) -> list[StoredEvent]:
        """Append every event of ``batch`` in one transaction, record each intent as processed and
        update the read models from ``state`` (the projection after these events); raise
        FencedError (writing nothing) when ``epoch`` is not the lease's current epoch."""
        ...

    async def processed(self, intent_ids: Sequence[str]) -> set[str]:
        """The subset of ``intent_ids`` already decided (in any earlier transaction)."""
        ...

    def read(self, *, after: int = 0, limit: int | None = None) -> AsyncIterator[StoredEvent]:
        """Events with position > ``after`` in order; raises CorruptEventError on an undecodable one."""
        ...

    async def last_position(self) -> int:
        """Position of the newest event (0 when empty)."""
        ...

    async def save_snapshot(self, state: ClusterState) -> None:
        """Store the state at ``state.position``."""
        ...

    async def load_state(self) -> ClusterState:
        """Newest snapshot plus a replay of the events after it (empty state when there is none)."""
        ...

    async def relay_position(self, name: str) -> int | None:
        """The last position relay ``name`` recorded as published (None when it never recorded one)."""
        ...

    async def save_relay_position(self, name: str, position: int) -> None:
        """Record that relay ``name`` published everything up to ``position`` (replacing the record:
        a relay starting over for a new stream moves it back)."""
        ...


class LeaseStore(Protocol):
    """The single-writer lease row; the epoch it hands out fences every append."""

    async def acquire(self, name: str, *, holder: str, ttl_s: float, now: datetime,
                      renew: bool = True) -> Lease | None:
        """Take the lease if free or expired (bumping the epoch) or renew it if ``holder`` has it;
        None when someone else holds a live lease. With ``renew=False`` (the caller does not hold
        the lease) a live lease under the same ``holder`` is refused too: a second process
        claiming a live holder's identity never becomes leader beside it."""
        ...

    async def release(self, name: str, *, holder: str) -> None:
        """Give the lease up (expire it now) if ``holder`` has it."""
        ...


# --- The bus side of the loop: intents in, events out, who leads ---------------------------------


Clock = Callable[[], datetime]
"""Wall-clock time as the lease and the decisions see it (timezone-aware UTC)."""


def utc_now() -> datetime:
    """The current time, timezone-aware UTC (the default :data:`Clock`)."""
    return datetime.now(UTC)


class IntentSource(Protocol):
    """The leader's durable, ordered view of the intent stream (GPULEDGER_INTENTS).

    Semantics every implementation keeps (tests/contract/test_bus.py runs them on NATS and the
    twin): :meth:`rewind` positions the consumer right after its ack floor, so every intent not yet
    settled comes again, first and in stream order; :meth:`settle` acks *all* up to the last
    ``ack`` delivery (ack policy all) and terminates the ``term`` ones; an unsettled delivery comes
    again after the ack wait, a nak'ed one after its delay. Errors are the transport's (the loop
    classifies them: services.allocator.loop.failures).
    """

    async def rewind(self) -> int:
        """Re-position after the ack floor (dropping whatever was fetched and not settled); returns
        the stream sequence the next fetch starts at (>= 1)."""
        ...

    async def fetch(self, *, wait_s: float) -> Sequence[Delivery]:
        """Up to the source's batch size of deliveries in delivery order; ``[]`` when none came
        within ``wait_s`` seconds. Raises RuntimeError before the first :meth:`rewind`."""
        ...

    async def in_order(self, deliveries: Sequence[Delivery],
                       expected: int) -> tuple[list[Delivery], list[Delivery], int]:
        """Split a fetch into the run that continues stream sequence ``expected``, the rest from the
        first gap on, and how many sequences were skipped because the stream no longer holds them
        (deleted). A delivery below ``expected`` before the run (a late redelivery of something
        committed) is acked and dropped."""
        ...

    async def settle(self, deliveries: Sequence[Delivery], actions: Sequence[Action]) -> None:
        """After the commit: terminate each ``term`` delivery and ack the last ``ack`` one (covering
        every earlier sequence); ``actions[i]`` belongs to ``deliveries[i]``."""
        ...

    async def nak(self, deliveries: Sequence[Delivery], *, delay_s: float) -> None:
        """Give ``deliveries`` back for redelivery after ``delay_s`` seconds. Best effort, never
        raises: a lost nak is made good by the ack wait or a rewind."""
        ...

    async def pending(self) -> int:
        """Intents not yet settled (unfetched + in flight); 0 when the consumer does not exist."""
        ...

    async def close(self) -> None:
        """Drop the subscription (the durable position stays); :meth:`rewind` opens it again."""
        ...


class EventSink(Protocol):
    """Where committed events are published (GPULEDGER_EVENTS), in log order, no gap, no double.

    ``offset`` is the last log position known published; it is recorded in the event store
    (``relay_position``) and :meth:`resume` starts from it.
    """

    offset: int
    on_skip: Callable[[], object]
    """Called once per event that cannot be published (larger than the bus allows)."""

    async def resume(self) -> int:
        """Set ``offset`` from the recorded position (never beyond the log's last one); returns it."""
        ...

    def offer(self, stored: Sequence[StoredEvent]) -> None:
        """Queue freshly committed events for publishing; never blocks, never raises."""
        ...

    async def run(self, stop: asyncio.Event, *, idle_s: float = 1.0) -> None:
        """Publish until ``stop`` is set or cancelled: on each offer, and every ``idle_s`` seconds
        read any gap between ``offset`` and what was offered from the log."""
        ...


Role = Literal["leader", "standby"]


class Leadership(Protocol):
    """Who may write: the fenced single-writer lease as the loop sees it."""

    holder: str
    changed: asyncio.Event
    """Set on every change of role or epoch (the loop clears it before waiting on it)."""

    @property
    def is_leader(self) -> bool:
        """True while this replica may append with :attr:`epoch`."""
        ...

    @property
    def epoch(self) -> int:
        """The fencing epoch every append carries (0 when not leader)."""
        ...

    @property
    def role(self) -> Role:
        """``leader`` or ``standby``."""
        ...

    async def run(self, stop: asyncio.Event) -> None:
        """Keep (or wait for) leadership until ``stop``; never blocked by the decision loop's work
        beyond one decide slice (services.allocator.loop.leader)."""
        ...

    def step_down(self) -> None:
        """Stop leading at once (an append was fenced: someone else holds a newer epoch)."""
        ...

    async def release(self) -> None:
        """Hand leadership over now (clean shutdown); errors are logged, never raised."""
        ...


class Bus(Protocol):
    """The message bus as the composition root wires it: NATS JetStream or the in-memory twin."""

    def intent_source(self, *, max_batch: int, ack_wait_s: float, flush_s: float) -> IntentSource:
        """The leader's consumer of GPULEDGER_INTENTS (``max_batch`` per fetch, redelivery after
        ``ack_wait_s`` s, acks confirmed within ``flush_s`` s)."""
        ...

    def event_sink(self, store: EventStore) -> EventSink:
        """The relay of ``store``'s log to GPULEDGER_EVENTS."""
        ...

    async def publish(self, intent: intents.AnyIntent) -> int:
        """Publish one intent (``Nats-Msg-Id`` = its id); returns its stream sequence."""
        ...

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each reconnection (in-flight deliveries may have been lost)."""
        ...


# --- The read side's port (History): what the API and the dashboard ask of the log and its read models.

ReasonRows = Mapping[str, tuple[str, str, str]]
"""Current reasons by allocation id: ``(reason, code, quota_dimension)`` (the ``allocations`` columns)."""


class History(Protocol):
    """The log as the read side asks it: the events of one allocation, the newest life of a pod,
    and the current reasons of queued requests written to the ``allocations`` read model.

    Implemented by both event stores (PostgreSQL through the ``allocations`` read model's indexes,
    the in-memory twin by scanning its log); one contract suite (tests/contract) runs against both."""

    async def events_of(self, allocation_id: str, *, limit: int) -> list[StoredEvent]:
        """The stored events naming ``allocation_id`` (its spec or its ``allocation_id`` field), in
        position order, at most ``limit`` (the oldest first); [] when the id never named one."""
        ...

    async def newest_of_pod(self, namespace: str, pod: str) -> str:
        """The allocation id of the newest life of pod ``namespace/pod`` ("" when it never had one)."""
        ...

    async def write_reasons(self, reasons: ReasonRows, *, position: int) -> int:
        """Set the current reasons of queued allocations as computed from the projection at log
        ``position``, outside the log. A row the log changed after ``position`` (its
        ``last_position`` is newer) or that is no longer queued is left alone, so a reader that is
        behind never overwrites what a newer event wrote. Returns the rows updated."""
        ...
