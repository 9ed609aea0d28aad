"""Rebuilding state from the log: newest snapshot + a fold of the events after it with ``evolve``.

Owns decoding a raw log row (never skipping one) and the fold both stores' ``load_state`` use
(when a snapshot is due is the loop's: services.allocator.loop.snapshots).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

from events import codec
from events.decisions import AnyEvent
from services.allocator.domain import evolve
from services.allocator.domain.state import ClusterState
from services.allocator.ports import CorruptEventError, StoredEvent


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (bulk loads allocate millions of long-lived objects and
    no cycles; each full collection would rescan them all, making a replay super-linear)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


async def fold(state: ClusterState, events: AsyncIterator[StoredEvent]) -> ClusterState:
    """Apply ``events`` (in position order) to ``state`` with ``evolve``; sets ``state.position``.

    Returns the same (mutated) state (a Scheduler re-ranks the touched nodes once, at its next
    decision). A reader error (e.g. CorruptEventError) propagates.
    """
    with no_cyclic_gc():
        async for stored in events:
            evolve(state, stored.event)
            state.position = stored.position
    return state


NUL_ESCAPE = b"\\u0000"
"""How msgspec writes a NUL character inside a JSON string; PostgreSQL JSONB refuses it."""


def encode_for_log(event: AnyEvent) -> bytes:
    """The JSON stored for ``event``: ``codec.encode``, with NUL characters in strings replaced by
    U+FFFD (JSONB cannot hold them; only echoed raw payloads of rejected intents can contain one)."""
    data = codec.encode(event)
    return data.replace(NUL_ESCAPE, b"\\ufffd") if NUL_ESCAPE in data else data


def decode_row(position: int, recorded_at: datetime, epoch: int, intent_id: str, type_: str,
               data: bytes | str) -> StoredEvent:
    """A StoredEvent from a raw log row; raises CorruptEventError naming ``position`` and ``type_``."""
    try:
        event = codec.decode_event(data)
    except codec.DecodeError as exc:
        raise CorruptEventError(f"event at position {position} (type {type_!r}) cannot be decoded: {exc}") from exc
    return StoredEvent(position=position, recorded_at=recorded_at, epoch=epoch, intent_id=intent_id, event=event)
