"""Ports of the allocator: the event store (log + processed intents + snapshots + read models),
the lease, and the read side's History. Adapters implement them for PostgreSQL and in memory; one contract test suite
(tests/contract) runs against both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Protocol

import msgspec

from events.decisions import AnyEvent
from services.allocator.domain.state import ClusterState

ACK = "ack"
"""Settle a delivery as done (its outcome is in the log)."""
TERM = "term"
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
