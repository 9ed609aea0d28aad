"""Base classes of the message contract: intents (imperative) and events (past tense).

Owns the two Struct roots every message derives from, the NewType identifiers and the
schema version. Every concrete message sets an explicit, stable snake_case ``tag`` (never
derived from the class name, so a rename cannot break stored events). Must not import
anything outside msgspec, the standard library and :mod:`events.bounds`.

Every Struct of the contract is frozen and declared ``gc=False``: an immutable tree of scalars,
strings, tuples and other such Structs cannot form a reference cycle, so the cyclic garbage
collector need not track it (tests/unit/events/test_gc_untracked.py; BENCHMARKS.md, "Event log").
"""

from __future__ import annotations

from datetime import datetime
from typing import NewType

import msgspec

from events.bounds import Id, SchemaVersion

SCHEMA_VERSION = 1
"""Version written into every new message; upcasters rewrite older stored payloads."""

IntentId = NewType("IntentId", str)
AllocationId = NewType("AllocationId", str)
"""An allocation's id: the pod UID for pods admitted through the webhook."""
NodeName = NewType("NodeName", str)
GpuName = NewType("GpuName", str)
PoolName = NewType("PoolName", str)
Namespace = NewType("Namespace", str)
Position = NewType("Position", int)
"""Global, gapless position of an event in the log (1-based)."""


class Intent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True, gc=False):
    """Something a producer asks the allocator to do; decided exactly once per ``intent_id``."""

    intent_id: Id
    schema_version: SchemaVersion = SCHEMA_VERSION


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True, gc=False):
    """A fact the allocator recorded. ``at`` is the decision time (UTC) passed into ``decide``."""

    at: datetime
    schema_version: int = SCHEMA_VERSION
