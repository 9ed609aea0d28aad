"""Preemption in the read model: the victim's life closes as ``preempted`` with its preemptor, the
docs/sql.md query 11 shows both sides, and ``replay --verify``'s rebuild equals the stored rows.
The log is written by the real append from decisions of the domain (critical over low)."""

from __future__ import annotations

import asyncio

import pytest

from events import intents as it
from services.allocator.adapters import database
from services.allocator.adapters.history import HistoryFilter, allocations
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.api.verify import verify
from services.allocator.ports import DecidedIntent
from tests.integration.log.logged import logged_database
from tests.integration.log.test_history_sql import doc_queries, run
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request

pytestmark = pytest.mark.integration


def _decisions() -> list[DecidedIntent]:
    c = Cluster()
    intents: list[it.AnyIntent] = [
        it.RegisterNode(intent_id="reg", node="n1", pool="p", gpus=(a_gpu("n1-g0", 100, 10 * Gi),)),
        it.RequestAllocation(intent_id="low", spec=a_request("low", 100, 10 * Gi, pool="p", ns="batch",
                                                             qos="low")),
        it.RequestAllocation(intent_id="crit", spec=a_request("crit", 60, 6 * Gi, pool="p", ns="serving",
                                                              qos="critical")),
    ]
    return [DecidedIntent(intent_id=i.intent_id, stream_seq=0, events=tuple(c.send(i))) for i in intents]


@pytest.fixture(scope="module")
def preempted_db(postgres_admin_url: str, postgres_template: str) -> str:
    return logged_database(postgres_admin_url, postgres_template, _decisions())


def test_doc_query_shows_each_preemption_with_both_sides(preempted_db: str) -> None:
    rows = run(preempted_db, doc_queries()[11])
    assert [(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]) for r in rows] == [
        ("batch", "low", 0, "n1", ["n1-g0"], "serving", "crit", 100_000, ["n1-g0"])]
    assert "preempted by serving/crit" in rows[0][10]


def test_the_victims_life_closes_as_preempted_with_its_preemptor(preempted_db: str) -> None:
    async def read() -> list[dict[str, object]]:
        pool = await database.create_pool(preempted_db)
        try:
            return await allocations(pool, HistoryFilter(limit=10))
        finally:
            await pool.close()

    rows = {r["allocation_id"]: r for r in asyncio.run(read())}
    assert rows["low"]["status"] == "preempted" and rows["low"]["preempted_by"] == "crit"
    assert rows["low"]["released_at"] == rows["crit"]["granted_at"]
    assert rows["crit"]["status"] == "granted" and rows["crit"]["preempted_by"] is None
    gpu = run(preempted_db, "SELECT used_milli_tflops, allocations FROM gpus WHERE name = 'n1-g0'")
    assert gpu == [(60_000, 1)]


def test_replay_verify_rebuilds_the_preempted_rows(preempted_db: str) -> None:
    async def check() -> bool:
        pool = await database.create_pool(preempted_db)
        try:
            report = await verify(PostgresEventStore(pool))
            return bool(report.ok)
        finally:
            await pool.close()

    assert asyncio.run(check())
