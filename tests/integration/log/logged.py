"""A fresh database whose log holds given decisions, written by the real append (the read-model tests' setup)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.domain import evolve
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent
from tests.fixtures.postgres import fresh_database


def logged_database(admin_url: str, template: str, decided: Sequence[DecidedIntent]) -> str:
    """The URL of a new database (a copy of ``template``) holding ``decided``, appended one intent per
    transaction under an allocator lease, with the projection folded event by event as the allocator
    folds it before each append."""
    _name, url = fresh_database(admin_url, template=template)

    async def fill() -> None:
        pool = await database.create_pool(url)
        try:
            lease = await PostgresLeaseStore(pool).acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
            assert lease is not None
            state, store = ClusterState.empty(), PostgresEventStore(pool)
            for one in decided:
                for event in one.events:
                    state = evolve(state, event)
                await store.append([one], lease="allocator", epoch=lease.epoch, state=state)
        finally:
            await pool.close()

    asyncio.run(fill())
    return url
