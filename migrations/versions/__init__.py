"""Alembic revision scripts, oldest first (0001 creates the log, the lease and the read models)."""
