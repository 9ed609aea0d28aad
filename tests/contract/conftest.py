"""The ``backend`` fixture: the same EventStore/LeaseStore contract over memory and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from services.allocator.adapters import database
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore


@dataclass
class Backend:
    """A store pair plus ``put_raw(position, type, json_text)``: overwrite one stored row's payload."""

    name: str
    events: Any
    leases: Any
    put_raw: Callable[[int, str, str], Awaitable[None]]


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.integration)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """An empty store pair of the parametrised kind."""
    if request.param == "memory":
        leases = InMemoryLeaseStore()
        store = InMemoryEventStore(leases)

        async def put_memory(position: int, type_: str, text: str) -> None:
            row = store.rows[position - 1]
            row.type, row.data = type_, text.encode()

        yield Backend("memory", store, leases, put_memory)
        return
    pool = await database.create_pool(request.getfixturevalue("database_url"), max_size=4)

    async def put_pg(position: int, type_: str, text: str) -> None:
        await pool.execute("UPDATE events SET type = $2, data = $3::jsonb WHERE position = $1", position, type_, text)

    try:
        yield Backend("postgres", PostgresEventStore(pool), PostgresLeaseStore(pool), put_pg)
    finally:
        await pool.close()
