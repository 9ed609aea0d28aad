"""Adapters of the allocator: the PostgreSQL event log and lease (``postgres``), their in-memory
twins (``memory``), the schema (``tables``; Alembic in ``migrations/``), read-model projections,
replay/snapshots and ``replay --verify`` (see docs/architecture.md), and the NATS side of the
allocator service (intent consumer, lease keeper, event relay).
"""
