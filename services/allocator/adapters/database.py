"""Database URLs, connection pools and schema migration (Alembic) for the event log.

Accepts any PostgreSQL URL spelling users paste (``postgresql://``, ``postgres://``,
``postgresql+asyncpg://``, ``postgresql+psycopg://``) and turns it into what each client needs:
asyncpg for the hot path, SQLAlchemy + psycopg (sync) for Alembic.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config

import migrations

_SCHEMES = ("postgresql+asyncpg://", "postgresql+psycopg://", "postgresql+psycopg2://", "postgresql://",
            "postgres://")


def _rest(url: str) -> str:
    for scheme in _SCHEMES:
        if url.startswith(scheme):
            return url[len(scheme):]
    raise ValueError(f"database_url must be a postgresql:// URL, got {url!r}")


def asyncpg_dsn(url: str) -> str:
    """The ``postgresql://`` DSN asyncpg takes; raises ValueError naming a non-PostgreSQL URL."""
    return "postgresql://" + _rest(url)


def sqlalchemy_url(url: str) -> str:
    """The SQLAlchemy URL with the sync psycopg driver (``postgresql+psycopg://``)."""
    return "postgresql+psycopg://" + _rest(url)


def writer_session(ttl_s: float) -> tuple[dict[str, str], float]:
    """Session settings and the client-side query timeout (seconds) of the leader's connections,
    tied to the lease TTL ``ttl_s`` so that a paused or partitioned leader cannot block a takeover:

    - ``lock_timeout`` and ``idle_in_transaction_session_timeout`` = TTL: a transaction left open
      by a stopped process is ended by PostgreSQL, which releases its locks (the fence row);
      nobody waits on a lock longer than a lease lives;
    - ``statement_timeout`` = TTL is set per append transaction by the event store;
    - server-side TCP keepalives (idle TTL, 1 s interval, 3 probes) drop a vanished client;
    - the client gives a query, and a connection attempt, up after ``max(5, 4 x TTL)`` seconds (a
      partition from PostgreSQL: asyncpg has no client-side keepalive setting).
    """
    ms = str(max(1, round(ttl_s * 1000)))
    settings = {"lock_timeout": ms, "idle_in_transaction_session_timeout": ms,
                "tcp_keepalives_idle": str(max(1, round(ttl_s))), "tcp_keepalives_interval": "1",
                "tcp_keepalives_count": "3"}
    return settings, max(5.0, 4 * ttl_s)


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pools' ``reset``: nothing beyond asyncpg's own release step (which rolls back an open
    transaction and drops listeners). The project keeps no session state on a pooled connection (no
    ``SET`` outside a transaction, no LISTEN, advisory lock, cursor or temporary table), so
    asyncpg's default reset query (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``)
    would be one more round trip per release for nothing: three per decided batch of the writer
    (BENCHMARKS.md "Read load")."""


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 4,
                      server_settings: dict[str, str] | None = None,
                      command_timeout: float | None = None) -> asyncpg.Pool:
    """An asyncpg pool on ``url`` (JSONB comes back as text: the store decodes it with msgspec);
    ``server_settings`` are session settings of every connection, ``command_timeout`` seconds the
    client waits for any query and for a new connection (None: forever, and asyncpg's 60 s connect)."""
    pool = await asyncpg.create_pool(asyncpg_dsn(url), min_size=min_size, max_size=max_size,
                                     server_settings=server_settings, command_timeout=command_timeout,
                                     timeout=command_timeout or 60, reset=keep_session)
    if pool is None:  # pragma: no cover - asyncpg returns None only when used without await
        raise RuntimeError("asyncpg.create_pool returned None")
    return pool


def alembic_config(url: str) -> Config:
    """An Alembic Config for ``migrations/`` (shipped inside the package) bound to ``url``."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` (idempotent; blocking, run it off the loop)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at ``url`` down to ``revision`` (``base`` drops every table)."""
    command.downgrade(alembic_config(url), revision)
