"""Alembic: upgrade head, downgrade base, upgrade head on an empty database; no autogenerate diff."""

from __future__ import annotations

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from services.allocator.adapters import database
from services.allocator.adapters.tables import metadata
from tests.fixtures.postgres import fresh_database

pytestmark = pytest.mark.integration


def _tables(url: str) -> set[str]:
    with psycopg.connect(database.asyncpg_dsn(url)) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def test_upgrade_downgrade_upgrade_round_trip(postgres_admin_url: str) -> None:
    _name, url = fresh_database(postgres_admin_url)
    database.upgrade(url)
    assert _tables(url) == set(metadata.tables) | {"alembic_version"}
    database.downgrade(url, "base")
    assert _tables(url) == {"alembic_version"}
    database.upgrade(url)
    assert _tables(url) == set(metadata.tables) | {"alembic_version"}
    database.upgrade(url)  # idempotent
    with psycopg.connect(database.asyncpg_dsn(url)) as conn:
        options = dict(conn.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname IN ('gpus', 'quota_usage')"))
    assert options == {"gpus": ["fillfactor=50"], "quota_usage": ["fillfactor=50"]}


def test_autogenerate_finds_no_difference_between_migrations_and_tables(database_url: str) -> None:
    engine = create_engine(database.sqlalchemy_url(database_url))
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_migrate_waits_for_the_migration_lock(postgres_admin_url: str) -> None:
    """Concurrent migrators (allocator init containers) are serialised by an advisory lock: while
    another session holds it, ``gpuledger migrate`` waits, and it completes once the lock is free."""
    import subprocess
    import sys

    from migrations.env_lock import MIGRATION_LOCK

    _name, url = fresh_database(postgres_admin_url)
    command = [sys.executable, "-c", "from services.cli.main import run; run()", "migrate", "--database-url", url]
    with psycopg.connect(database.asyncpg_dsn(url)) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        with pytest.raises(subprocess.TimeoutExpired):
            run.wait(timeout=3)
        assert _tables(url) == set()
        holder.commit()
    output = run.communicate(timeout=120)[0].decode()
    assert run.returncode == 0, output
    assert _tables(url) == set(metadata.tables) | {"alembic_version"}
