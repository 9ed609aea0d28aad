"""The migration lock: concurrent migrators (two allocator init containers) run one after the other."""

MIGRATION_LOCK = 7_243_915_001
"""``pg_advisory_xact_lock`` key taken by ``migrations/env.py`` for the whole migration transaction."""
