"""In-memory twins of the PostgreSQL EventStore and LeaseStore (same contract, same tests).

For unit tests of the allocator loop and for ``simulate``: events are kept as their encoded JSON
(so reads decode, upcast and can fail exactly like the PostgreSQL store), read models are the same
projections. Nothing survives the process. Not thread-safe; safe for one event loop (every method
runs without awaiting in between, so each append is atomic).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import msgspec

from events import codec
from services.allocator.adapters import allocation_table, projection
from services.allocator.adapters.replay import decode_row, encode_for_log, fold
from services.allocator.domain.state import ClusterState, encode_snapshot, resume_from
from services.allocator.ports import (
    DecidedIntent,
    DuplicateIntentError,
    FencedError,
    Lease,
    ReasonRows,
    StoredEvent,
)


class StoredRow(msgspec.Struct, kw_only=True):
    """One raw row of the in-memory log (``data`` is the JSON the codec wrote)."""

    position: int
    recorded_at: datetime
    epoch: int
    intent_id: str
    type: str
    data: bytes


class InMemoryLeaseStore:
    """LeaseStore in a dict: ``leases`` name -> Lease. Same rules as the PostgreSQL one."""

    def __init__(self) -> None:
        self.leases: dict[str, Lease] = {}

    async def acquire(self, name: str, *, holder: str, ttl_s: float, now: datetime,
                      renew: bool = True) -> Lease | None:
        """Take, renew or refuse the lease (see :class:`services.allocator.ports.LeaseStore`)."""
        now = projection.utc(now)
        current = self.leases.get(name)
        expires = now + timedelta(seconds=ttl_s)
        if current is None:
            lease = Lease(name=name, holder=holder, epoch=1, expires_at=expires)
        elif current.holder == holder and current.expires_at > now and renew:
            lease = Lease(name=name, holder=holder, epoch=current.epoch, expires_at=expires)
        elif current.expires_at <= now:
            lease = Lease(name=name, holder=holder, epoch=current.epoch + 1, expires_at=expires)
        else:
            return None
        self.leases[name] = lease
        return lease

    async def release(self, name: str, *, holder: str) -> None:
        """Expire the lease now if ``holder`` has it (the epoch stays; the next taker bumps it)."""
        current = self.leases.get(name)
        if current is not None and current.holder == holder:
            self.leases[name] = Lease(name=name, holder=holder, epoch=current.epoch,
                                      expires_at=datetime(1970, 1, 1, tzinfo=UTC))

    def epoch(self, name: str) -> int | None:
        """The lease's current epoch (None when it was never taken)."""
        current = self.leases.get(name)
        return None if current is None else current.epoch


class InMemoryEventStore:
    """EventStore kept in lists and dicts; fenced by an :class:`InMemoryLeaseStore`.

    ``rows`` is the raw log (tests may corrupt a row's ``data`` to exercise CorruptEventError);
    ``gpus``, ``allocations``, ``quota_usage`` are the read models.
    """

    def __init__(self, leases: InMemoryLeaseStore) -> None:
        self.leases = leases
        self.rows: list[StoredRow] = []
        self.intents: dict[str, tuple[int, int]] = {}
        self.snapshots: dict[int, bytes] = {}
        self.relay_positions: dict[str, int] = {}
        self.gpus: dict[str, projection.Row] = {}
        self.allocations = allocation_table.AllocationTable()
        self.quota_usage: dict[str, projection.Row] = {}

    async def append(self, batch: Sequence[DecidedIntent], *, lease: str, epoch: int,
                     state: ClusterState) -> list[StoredEvent]:
        """Append ``batch`` atomically; FencedError / DuplicateIntentError leave everything unchanged."""
        if self.leases.epoch(lease) != epoch:
            raise FencedError(f"lease {lease!r} epoch is {self.leases.epoch(lease)}, writer has {epoch}")
        _check_unique(batch, self.intents)
        now = datetime.now(UTC)
        stored: list[StoredEvent] = []
        position = len(self.rows)
        for decided in batch:
            for event in decided.events:
                position += 1
                self.rows.append(StoredRow(position=position, recorded_at=now, epoch=epoch,
                                           intent_id=decided.intent_id, type=codec.tag_of(event),
                                           data=encode_for_log(event)))
                stored.append(StoredEvent(position=position, recorded_at=now, epoch=epoch,
                                          intent_id=decided.intent_id, event=event))
            self.intents[decided.intent_id] = (decided.stream_seq, position)
        self._project(stored, state)
        return stored

    def _project(self, stored: list[StoredEvent], state: ClusterState) -> None:
        self.allocations.apply(projection.allocation_changes(stored))
        touched = projection.touched(stored, state)
        for name in [n for n, row in self.gpus.items() if row["node"] in touched.nodes]:
            del self.gpus[name]
        self.gpus.update((r["name"], r) for r in projection.gpu_rows(state, touched.nodes))
        rows, gone = projection.gpu_rows_named(state, touched.gpus)
        for name in gone:
            self.gpus.pop(name, None)
        self.gpus.update((r["name"], r) for r in rows)
        for namespace in touched.namespaces:
            self.quota_usage.pop(namespace, None)
        self.quota_usage.update((r["namespace"], r) for r in projection.quota_rows(state, touched.namespaces))

    async def processed(self, intent_ids: Sequence[str]) -> set[str]:
        """The subset of ``intent_ids`` already appended."""
        return {i for i in intent_ids if i in self.intents}

    async def read(self, *, after: int = 0, limit: int | None = None) -> AsyncIterator[StoredEvent]:
        """Events after ``after`` in order (decoded from their JSON; CorruptEventError if not decodable)."""
        end = len(self.rows) if limit is None else min(len(self.rows), after + limit)
        for row in self.rows[max(after, 0):end]:
            yield decode_row(row.position, row.recorded_at, row.epoch, row.intent_id, row.type, row.data)

    async def last_position(self) -> int:
        """Position of the newest event (0 when empty)."""
        return len(self.rows)

    async def save_snapshot(self, state: ClusterState) -> None:
        """Keep the encoded state at ``state.position`` (replacing one at the same position)."""
        self.snapshots[state.position] = encode_snapshot(state)

    async def load_state(self) -> ClusterState:
        """Newest snapshot plus the events after it (from the empty state when there is none or it is
        of another projection version: ``state.resume_from``)."""
        state = resume_from(self.snapshots[max(self.snapshots)] if self.snapshots else None)
        return await fold(state, self.read(after=state.position))

    async def relay_position(self, name: str) -> int | None:
        """The last position relay ``name`` recorded (None when never)."""
        return self.relay_positions.get(name)

    async def save_relay_position(self, name: str, position: int) -> None:
        """Record ``position`` for relay ``name``."""
        self.relay_positions[name] = position

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        """The newest snapshot as (position, encoded state), or None."""
        if not self.snapshots:
            return None
        position = max(self.snapshots)
        return position, self.snapshots[position]

    async def events_of(self, allocation_id: str, *, limit: int) -> list[StoredEvent]:
        """History: the events naming ``allocation_id`` in position order (a scan of the log)."""
        out: list[StoredEvent] = []
        async for stored in self.read():
            if len(out) >= limit:
                break
            if _names(stored.event, allocation_id):
                out.append(stored)
        return out

    async def newest_of_pod(self, namespace: str, pod: str) -> str:
        """History: the allocation id of the pod's newest life ("" when none), from the read model."""
        return self.allocations.newest_of_pod(namespace, pod)

    async def write_reasons(self, reasons: ReasonRows, *, position: int) -> int:
        """History: the current reasons onto the queued rows no event changed after ``position``."""
        return self.allocations.set_reasons(reasons, position=position)

    async def read_models(self) -> projection.ReadModels:
        """Every read-model row, sorted by key."""
        return projection.ReadModels(
            gpus=[self.gpus[k] for k in sorted(self.gpus)],
            allocations=self.allocations.sorted_rows(),
            quota_usage=[self.quota_usage[k] for k in sorted(self.quota_usage)],
        )


def _names(event: object, allocation_id: str) -> bool:
    """True when ``event`` is about ``allocation_id`` (its spec's or its own ``allocation_id``)."""
    spec = getattr(event, "spec", None)
    if spec is not None:
        return bool(getattr(spec, "allocation_id", None) == allocation_id)
    return bool(getattr(event, "allocation_id", None) == allocation_id)


def _check_unique(batch: Sequence[DecidedIntent], known: dict[str, tuple[int, int]]) -> None:
    seen: set[str] = set()
    for decided in batch:
        if decided.intent_id in known or decided.intent_id in seen:
            raise DuplicateIntentError(f"intent {decided.intent_id!r} was already processed")
        seen.add(decided.intent_id)
