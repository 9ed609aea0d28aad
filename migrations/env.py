"""Alembic environment: migrates the database named by ``sqlalchemy.url`` or GPULEDGER_DATABASE_URL.

Target metadata is :data:`services.allocator.adapters.tables.metadata`, so ``alembic revision
--autogenerate`` diffs the live schema against the SQLAlchemy Core tables.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool, text

from migrations.env_lock import MIGRATION_LOCK
from services.allocator.adapters.database import sqlalchemy_url
from services.allocator.adapters.tables import metadata

config = context.config
target_metadata = metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("GPULEDGER_DATABASE_URL", "")
    if not url:
        raise RuntimeError("no database: set sqlalchemy.url or GPULEDGER_DATABASE_URL")
    return sqlalchemy_url(url)


def run_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``)."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Run the migrations on a live connection (one transaction)."""
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
