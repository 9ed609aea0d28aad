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


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 4) -> asyncpg.Pool:
    """An asyncpg pool on ``url`` (JSONB comes back as text: the store decodes it with msgspec)."""
    pool = await asyncpg.create_pool(asyncpg_dsn(url), min_size=min_size, max_size=max_size)
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
