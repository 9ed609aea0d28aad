"""Adapters of the allocator's ports: the PostgreSQL event log and lease (``postgres``), their
in-memory twins (``memory``), the schema (``tables``, Alembic in ``migrations/``), read-model
projections, replay/snapshots and ``replay --verify``. See docs/architecture.md.
"""
