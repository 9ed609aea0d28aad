"""The project's asyncpg pools release a connection without asyncpg's reset query (one round trip
per release saved, three per decided batch) and still hand out a clean connection: an open
transaction is rolled back on release (asyncpg's own step), and nothing else needs resetting
because no code keeps session state on a pooled connection (``database.keep_session``)."""

from __future__ import annotations

import asyncpg
import pytest

from services.allocator.adapters import database

pytestmark = pytest.mark.integration


async def test_a_release_sends_no_reset_query(database_url: str) -> None:
    pool = await database.create_pool(database_url, max_size=1)
    sent: list[str] = []
    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda logged: sent.append(logged.query))
            await conn.execute("SELECT 1")
        async with pool.acquire() as again:  # max_size 1: the same connection, its logger still on
            await again.execute("SELECT 2")
        assert sent == ["SELECT 1", "SELECT 2"]
    finally:
        await pool.close()


async def test_a_connection_released_inside_a_transaction_comes_back_rolled_back(database_url: str) -> None:
    pool = await database.create_pool(database_url, max_size=1)
    try:
        with pytest.raises(RuntimeError, match="the caller failed"):
            async with pool.acquire() as conn:
                await conn.execute("BEGIN")
                await conn.execute("INSERT INTO relay_position (name, position) VALUES ('t', 7)")
                raise RuntimeError("the caller failed mid-transaction")
        async with pool.acquire() as again:
            assert not again.is_in_transaction()
            assert await again.fetchval("SELECT count(*) FROM relay_position WHERE name = 't'") == 0
            await again.execute("INSERT INTO relay_position (name, position) VALUES ('t', 8)")
        assert await pool.fetchval("SELECT position FROM relay_position WHERE name = 't'") == 8
    finally:
        await pool.close()


async def test_a_plain_asyncpg_pool_would_send_the_reset_query(database_url: str) -> None:
    """The saving is real: asyncpg's default release runs ``RESET ALL`` and the rest."""
    pool = await asyncpg.create_pool(database.asyncpg_dsn(database_url), min_size=1, max_size=1)
    sent: list[str] = []
    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda logged: sent.append(logged.query))
        assert any("RESET ALL" in query for query in sent)
    finally:
        await pool.close()
