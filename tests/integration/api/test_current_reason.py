"""The current reason of a queued request is the one shown everywhere (issue 14.2).

Story: a request waits for capacity; a quota of its namespace is lowered; capacity frees. The
request still waits, now for the quota: the API, the ``allocations`` row the CLI's ``history``
reads, docs/sql.md query 4 and ``replay --verify`` all agree on the quota reason, and no event was
appended to say so. When the quota goes, it is granted and its row shows the queueing reason again.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from services.allocator.adapters import database, history
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.api import verify
from tests.integration.log.test_history_sql import doc_queries, run
from tests.integration.service.factory import register_node
from tests.integration.service.harness import start_reader

from .conftest import Api, pod

pytestmark = pytest.mark.integration


async def _row(store: PostgresEventStore) -> dict[str, object]:
    (row,) = await history.allocations(store.pool, history.HistoryFilter(namespace="team-a", pod="pod-c"))
    return history.to_json(row)


async def _eventually_row(store: PostgresEventStore, code: str) -> dict[str, object]:
    for _ in range(300):
        row = await _row(store)
        if row["code"] == code:
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"the allocations row never showed code {code!r}: {row}")


async def test_a_queued_requests_reason_follows_what_blocks_it_now(api: Api, database_url: str) -> None:
    store = api.replica.allocator.store
    assert isinstance(store, PostgresEventStore)
    await api.publish(register_node("n1", gpus=1))
    await api.send("POST", "/api/v1/allocations", pod("pod-a", tflops="40"))
    _, other = await api.send("POST", "/api/v1/allocations", pod("pod-b", tflops="60", namespace="team-b"))
    _, waiting = await api.send("POST", "/api/v1/allocations", pod("pod-c", tflops="50"))
    assert waiting["type"] == "allocation_queued" and "0/1 GPUs fit" in waiting["reason"]
    assert (await _row(store))["code"] == "capacity"

    _, quota = await api.send("PUT", "/api/v1/quotas/team-a", {"total_requests": {"tflops": "50"}})
    assert quota["type"] == "quota_set"
    _, released = await api.send("DELETE", f"/api/v1/allocations/{quote(other['allocation_id'], safe='')}")
    assert released["type"] == "allocation_released"
    position = api.replica.allocator.state.position

    path = f"/api/v1/allocations/{quote(waiting['allocation_id'], safe='')}"
    _, now = await api.get(path)
    assert now["status"] == "queued" and now["explanation"]["code"] == "quota", now
    assert now["explanation"]["quota_dimension"] and "quota" in now["explanation"]["would_need"]
    assert now["queued_reason"] == waiting["reason"]
    _, queue = await api.get("/api/v1/queue")
    assert [(e["allocation_id"], e["code"]) for e in queue["items"]] == [("team-a/pod-c", "quota")]
    _, listed = await api.get("/api/v1/allocations", status="queued")
    assert listed["items"][0]["code"] == "quota" and "quota" in listed["items"][0]["reason"]

    row = await _eventually_row(store, "quota")
    assert row["reason"] == now["reason"] and row["status"] == "queued"
    (why,) = await asyncio.to_thread(run, database_url, doc_queries()[4])
    assert (why[1], why[3], why[7], why[9]) == ("allocation_queued", "capacity", "queued", "quota")
    assert why[8] == now["reason"] and why[10] == now["explanation"]["quota_dimension"]
    assert api.replica.allocator.state.position == position  # no event was appended to say so
    report = await verify.verify(store)
    assert report.ok, report.problems

    _, removed = await api.send("DELETE", "/api/v1/quotas/team-a")
    assert removed["type"] == "quota_removed"
    _, granted = await api.get(path)
    assert granted["status"] == "granted"
    row = await _eventually_row(store, "capacity")
    assert row["status"] == "granted" and row["reason"] == waiting["reason"]  # the queueing reason again
    report = await verify.verify(store)
    assert report.ok, report.problems


async def test_a_new_reader_rewrites_every_queued_rows_reason(api: Api, nats_url: str, database_url: str) -> None:
    """A reader that stopped before writing a changed reason leaves a stale row; the next reader's
    first round rewrites every queued row, so ``replay --verify`` agrees again."""
    await api.publish(register_node("n1", gpus=1))
    await api.send("POST", "/api/v1/allocations", pod("pod-a", tflops="90"))
    _, waiting = await api.send("POST", "/api/v1/allocations", pod("pod-c", tflops="50"))
    assert waiting["type"] == "allocation_queued"
    await api.reader.stop()
    pool = await database.create_pool(database_url, max_size=2)
    store = PostgresEventStore(pool)
    try:
        await pool.execute("UPDATE allocations SET reason = 'stale', code = 'stale' WHERE pod = 'pod-c'")
        assert not (await verify.verify(store)).ok
        successor = await start_reader(nats_url, database_url=database_url)
        try:
            row = await _eventually_row(store, "capacity")
            assert row["reason"] == waiting["reason"]
            report = await verify.verify(store)
            assert report.ok, report.problems
        finally:
            await successor.stop()
    finally:
        await pool.close()


async def test_a_reader_behind_the_log_never_overwrites_a_newer_row(api: Api) -> None:
    """The reasons are written with the position they were computed at: a row an event wrote after
    it (here the pod's second life, queued again) keeps what that event wrote."""
    store = api.replica.allocator.store
    assert isinstance(store, PostgresEventStore)
    await api.publish(register_node("n1", gpus=1))
    await api.send("POST", "/api/v1/allocations", pod("pod-a", tflops="90"))
    _, first = await api.send("POST", "/api/v1/allocations", pod("pod-c", tflops="50"))
    _, withdrawn = await api.send("DELETE", "/api/v1/allocations/team-a%2Fpod-c")
    assert withdrawn["type"] == "allocation_released"
    _, second = await api.send("POST", "/api/v1/allocations", pod("pod-c", tflops="50"))
    assert first["type"] == second["type"] == "allocation_queued" and second["position"] > first["position"]
    await api.reader.stop()  # its own keeper writes no more: only the rows below
    rows = {second["allocation_id"]: ("stale reason", "stale", "")}

    async def queued_code() -> object:
        (row,) = await history.allocations(store.pool, history.HistoryFilter(pod="pod-c", status="queued"))
        return row["code"]

    assert await store.write_reasons(rows, position=first["position"]) == 0  # computed before this life began
    assert await queued_code() == "capacity"
    assert await store.write_reasons(rows, position=second["position"]) == 1
    assert await queued_code() == "stale"
