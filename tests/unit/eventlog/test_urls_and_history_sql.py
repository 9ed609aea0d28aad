"""Database URL spellings and the history filter's SQL (no database needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.allocator.adapters import database
from services.allocator.adapters.history import HistoryFilter, allocations_sql


@pytest.mark.parametrize("url", ["postgresql://u@h:1/d", "postgres://u@h:1/d", "postgresql+asyncpg://u@h:1/d",
                                 "postgresql+psycopg://u@h:1/d"])
def test_every_postgres_spelling_maps_to_both_clients(url: str) -> None:
    assert database.asyncpg_dsn(url) == "postgresql://u@h:1/d"
    assert database.sqlalchemy_url(url) == "postgresql+psycopg://u@h:1/d"


def test_a_non_postgres_url_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="mysql://x"):
        database.asyncpg_dsn("mysql://x")


def test_history_filter_binds_every_value_as_a_parameter() -> None:
    at = datetime(2026, 3, 1, 8, 10, tzinfo=UTC)
    sql, args = allocations_sql(HistoryFilter(namespace="a'; drop", node="n2", at=at, limit=5))
    assert "a'; drop" not in sql
    assert args == ["a'; drop", "n2", at, 5]
    assert "namespace = $1" in sql and "node = $2" in sql and "granted_at <= $3" in sql and sql.endswith("LIMIT $4")


def test_no_filter_lists_the_newest_lives() -> None:
    sql, args = allocations_sql(HistoryFilter())
    assert "WHERE" not in sql and args == [50]
