"""SQLAlchemy 2 Core schema of the event log: the log itself, its indexes and the read models.

Owns table definitions only (the Alembic migrations in ``migrations/versions`` create exactly
this metadata; a test runs autogenerate against it and expects no difference). Units: TFLOPS
columns hold integer milli-TFLOPS, VRAM columns integer bytes, times are UTC ``timestamptz``.

- ``events``: the append-only log; ``position`` is gapless and in commit order (1-based).
- ``processed_intents``: one row per decided intent (NATS stream sequence, last position).
- ``snapshots``: msgpack state (``encode_snapshot``) at a position.
- ``leases``: the single-writer lease row with its fencing ``epoch``.
- ``relay_position``: per relay, the last log position known to be in GPULEDGER_EVENTS.
- ``gpus``, ``allocations``, ``quota_usage``: read models projected in the append transaction.
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

events = Table(
    "events",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("intent_id", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("data", JSONB, nullable=False),
    Index("ix_events_resize", text("(data ->> 'allocation_id')"), "position",
          postgresql_where=text("type IN ('allocation_resized', 'resize_rejected')")),
    Index("ix_events_gang", text("(data ->> 'key')"), "position",
          postgresql_where=text("type IN ('gang_placed', 'gang_timed_out', 'gang_degraded')")),
)
"""No index on ``type``: every index entry costs each append; the history reaches an allocation's
events through ``allocations`` (queued/rejected: ``position = id``) or ``ix_events_resize``; gang
events (rare) through ``ix_events_gang`` (the views of migration 0005, docs/sql.md)."""

processed_intents = Table(
    "processed_intents",
    metadata,
    Column("intent_id", Text, primary_key=True),
    Column("stream_seq", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("state", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

leases = Table(
    "leases",
    metadata,
    Column("name", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

relay_position = Table(
    "relay_position",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", BigInteger, nullable=False),
)

gpus = Table(
    "gpus",
    metadata,
    Column("name", Text, primary_key=True),
    Column("node", Text, nullable=False),
    Column("pool", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("phase", Text, nullable=False),
    Column("capacity_milli_tflops", BigInteger, nullable=False),
    Column("capacity_vram_bytes", BigInteger, nullable=False),
    Column("used_milli_tflops", BigInteger, nullable=False),
    Column("used_vram_bytes", BigInteger, nullable=False),
    Column("available_milli_tflops", BigInteger, nullable=False),
    Column("available_vram_bytes", BigInteger, nullable=False),
    Column("allocations", Integer, nullable=False),
    Index("ix_gpus_node", "node"),
    Index("ix_gpus_pool_model", "pool", "model"),
    postgresql_with={"fillfactor": "50"},
)
"""Rewritten on every grant/release: half-empty pages let PostgreSQL update rows in place (HOT)."""

allocations = Table(
    "allocations",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("allocation_id", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod", Text, nullable=False),
    Column("workload", Text, nullable=False),
    Column("pool", Text, nullable=False),
    Column("qos", Text, nullable=False),
    Column("gpu_count", Integer, nullable=False),
    Column("request_milli_tflops", BigInteger, nullable=False),
    Column("request_vram_bytes", BigInteger, nullable=False),
    Column("request_compute_milli_percent", BigInteger, nullable=False),
    Column("limit_milli_tflops", BigInteger, nullable=False),
    Column("limit_vram_bytes", BigInteger, nullable=False),
    Column("status", Text, nullable=False),
    Column("node", Text, nullable=True),
    Column("gpus", ARRAY(Text), nullable=False),
    Column("requested_at", DateTime(timezone=True), nullable=False),
    Column("queued_at", DateTime(timezone=True), nullable=True),
    Column("granted_at", DateTime(timezone=True), nullable=True),
    Column("resized_at", DateTime(timezone=True), nullable=True),
    Column("released_at", DateTime(timezone=True), nullable=True),
    Column("resize_count", Integer, nullable=False),
    Column("from_queue", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("code", Text, nullable=False),
    Column("quota_dimension", Text, nullable=False),
    Column("release_reason", Text, nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Column("preempted_by", Text, nullable=True),
    Index("ix_allocations_open", "allocation_id", unique=True,
          postgresql_where=text("status IN ('queued', 'granted')")),
    Index("ix_allocations_lives", "allocation_id", "id"),
    Index("ix_allocations_namespace_requested", "namespace", "requested_at"),
    Index("ix_allocations_pod", "pod"),
    Index("ix_allocations_node_granted", "node", "granted_at"),
)

quota_usage = Table(
    "quota_usage",
    metadata,
    Column("namespace", Text, primary_key=True),
    Column("requests_milli_tflops", BigInteger, nullable=False),
    Column("requests_vram_bytes", BigInteger, nullable=False),
    Column("limits_milli_tflops", BigInteger, nullable=False),
    Column("limits_vram_bytes", BigInteger, nullable=False),
    Column("workers", Integer, nullable=False),
    Column("quota_requests_milli_tflops", BigInteger, nullable=True),
    Column("quota_requests_vram_bytes", BigInteger, nullable=True),
    postgresql_with={"fillfactor": "50"},
)

ALLOCATION_COLUMNS: tuple[str, ...] = tuple(c.name for c in allocations.columns)
GPU_COLUMNS: tuple[str, ...] = tuple(c.name for c in gpus.columns)
QUOTA_COLUMNS: tuple[str, ...] = tuple(c.name for c in quota_usage.columns)
