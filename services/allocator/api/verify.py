"""``replay --verify``: rebuild the state from position 0 and check it against everything derived.

Checks, in one pass over the log: (1) every event decodes (else CorruptEventError propagates),
(2) the newest snapshot, replayed to the same position, has the rebuild's digest, (3) the read
models (``gpus``, ``allocations``, ``quota_usage``) equal the rows the rebuild projects, a queued
row with the reason :mod:`services.allocator.api.reasons` gives it in the rebuilt state (the allocator
keeps those current outside the log; one ``decide`` per queued request). The digest
reported is the rebuild's (``services.allocator.domain.state.digest``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import msgspec

from services.allocator.adapters import allocation_table, projection
from services.allocator.adapters.replay import fold, no_cyclic_gc
from services.allocator.api import reasons
from services.allocator.domain.state import ClusterState, StaleSnapshot, decode_snapshot, digest
from services.allocator.ports import EventStore, StoredEvent

CHUNK = 10_000
"""Events projected into the ``allocations`` rebuild at a time (bounds memory on big logs)."""


class VerifiableStore(EventStore, Protocol):
    """An EventStore that also exposes its newest snapshot and its read-model rows."""

    async def latest_snapshot(self) -> tuple[int, bytes] | None: ...

    async def read_models(self) -> projection.ReadModels: ...


class VerifyReport(msgspec.Struct, kw_only=True):
    """Outcome: ``events`` folded, last ``position``, rebuild ``digest``, ``ok``, and ``problems``
    (one line per mismatch; empty when ok)."""

    events: int
    position: int
    digest: str
    ok: bool
    problems: list[str] = []


async def rebuild(store: EventStore, *, until: int) -> tuple[ClusterState, allocation_table.AllocationTable, int]:
    """Fold events 1..``until`` from an empty state; returns (state, allocations rebuild, event count)."""
    table, counter = allocation_table.AllocationTable(), [0]

    async def chunked() -> AsyncIterator[StoredEvent]:
        chunk: list[StoredEvent] = []
        async for stored in store.read(after=0, limit=until):
            chunk.append(stored)
            yield stored
            if len(chunk) >= CHUNK:
                table.apply(projection.allocation_changes(chunk))
                counter[0] += len(chunk)
                chunk = []
        table.apply(projection.allocation_changes(chunk))
        counter[0] += len(chunk)

    state = await fold(ClusterState.empty(), chunked())
    return state, table, counter[0]


async def verify(store: VerifiableStore) -> VerifyReport:
    """Run every check; never raises for a mismatch (see ``ok``/``problems``), raises CorruptEventError."""
    with no_cyclic_gc():
        return await _verify(store)


MOVE_RETRIES = 5
"""Times the read models are read again when the log moved while they were read (the new events are
folded first); a live stack appends liveness ticks and decisions while ``replay --verify`` runs."""


async def _verify(store: VerifiableStore) -> VerifyReport:
    end = await store.last_position()
    state, table, count = await rebuild(store, until=end)
    problems = await _snapshot_problems(store, state)
    models, moved = await store.read_models(), await store.last_position()
    for _ in range(MOVE_RETRIES):
        if moved == end:
            break
        extra = [stored async for stored in store.read(after=end, limit=moved - end)]
        state = await fold(state, _each(extra))
        table.apply(projection.allocation_changes(extra))
        count, end = count + len(extra), moved
        models, moved = await store.read_models(), await store.last_position()
    if moved != end:
        problems.append(f"the log moved from {end} during the check: re-run on a quiet log")
    table.set_reasons({k: r.row() for k, r in reasons.all_current(state).items()})
    expected = projection.ReadModels(gpus=projection.gpu_rows(state), allocations=table.sorted_rows(),
                                     quota_usage=projection.quota_rows(state))
    for name in ("gpus", "allocations", "quota_usage"):
        problem = _diff(name, getattr(models, name), getattr(expected, name))
        if problem:
            problems.append(problem)
    full = digest(state)
    return VerifyReport(events=count, position=state.position, digest=full, ok=not problems, problems=problems)


async def _each(events: list[StoredEvent]) -> AsyncIterator[StoredEvent]:
    for stored in events:
        yield stored


async def rebuild_only(store: EventStore) -> VerifyReport:
    """Fold the whole log (no comparisons): the report of a plain ``replay``."""
    end = await store.last_position()
    state, _table, count = await rebuild(store, until=end)
    return VerifyReport(events=count, position=state.position, digest=digest(state), ok=True)


async def _snapshot_problems(store: VerifiableStore, state: ClusterState) -> list[str]:
    latest = await store.latest_snapshot()
    if latest is None:
        return []
    position, data = latest
    if position > state.position:
        return [f"snapshot at {position} is ahead of the log ({state.position})"]
    try:
        snap = decode_snapshot(data)
    except StaleSnapshot:
        return []  # written by other projection rules: the allocator rebuilds instead of resuming from it
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return [f"snapshot at {position} cannot be decoded: {exc}"]
    snap = await fold(snap, store.read(after=position, limit=state.position - position))
    if digest(snap) != digest(state):
        return [f"snapshot at {position} replayed to {state.position} has digest {digest(snap)}, "
                f"the rebuild from 0 has {digest(state)}"]
    return []


def _diff(table: str, actual: list[projection.Row], expected: list[projection.Row]) -> str:
    if actual == expected:
        return ""
    if len(actual) != len(expected):
        return f"{table}: {len(actual)} rows stored, {len(expected)} rebuilt"
    for got, want in zip(actual, expected, strict=True):
        if got != want:
            keys = sorted(k for k in want if got.get(k) != want[k])
            key = next(iter(want.values()))
            hint = (" (the current reason of a queued row: the leader writes it within a few rounds of "
                    "0.5 s; re-run on a quiet log)") if set(keys) <= set(projection.REASON_COLUMNS) else ""
            return f"{table}: row {key!r} differs in {', '.join(keys)}{hint}"
    return f"{table}: rows differ"
