"""One intent's failure stays with that intent (real nats-server + PostgreSQL, in-process replica):
a database error on its rows is isolated by splitting the batch, an exception in ``decide`` is
rejected on a reloaded projection, and a loop that cannot make progress fails ``/readyz``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import aiohttp
import asyncpg
import pytest
from nats.js import JetStreamContext

from events import intents
from events.decisions import AnyEvent
from services.allocator import domain
from services.allocator.adapters import database
from services.allocator.domain.state import ClusterState
from services.shared import messaging

from .factory import register_node, request
from .harness import start_replica, until
from .outcomes import check_one_outcome_each, outcomes, rejected_reason, wait_decided

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    db = await database.create_pool(database_url)
    try:
        yield db
    finally:
        await db.close()


async def publish(js: JetStreamContext, sent: list[intents.AnyIntent]) -> None:
    for intent in sent:
        await messaging.publish_intent(js, intent)


async def test_a_database_error_on_one_intents_rows_is_isolated_by_splitting_the_batch(
        nats_url: str, database_url: str, jetstream: JetStreamContext, pool: asyncpg.Pool) -> None:
    # a constraint only this intent's read-model row violates: PostgreSQL refuses its append
    await pool.execute("ALTER TABLE allocations ADD CONSTRAINT no_poison CHECK (pod <> 'poison')")
    sent: list[intents.AnyIntent] = [register_node("n1", gpus=4)]
    sent += [request(f"p{i}") for i in range(9)] + [request("poison")] + [request(f"q{i}") for i in range(10)]
    await publish(jetstream, sent)  # all before the leader starts: one fetched batch of 21
    replica = await start_replica(nats_url, database_url=database_url)
    try:
        await wait_decided(pool, "req-q9")
        decided = await outcomes(pool)
        assert [decided[seq].intent_id for seq in sorted(decided)] == [i.intent_id for i in sent]
        by_id = {o.intent_id: o.types for o in decided.values()}
        assert by_id["req-poison"] == ["intent_rejected"]
        assert "no_poison" in await rejected_reason(pool, "req-poison")
        assert all(by_id[i.intent_id] == ["allocation_granted"] for i in sent[1:] if i.intent_id != "req-poison")
        assert replica.allocator.watchdog.isolated._value.get() == 1
        await check_one_outcome_each(pool)
    finally:
        await replica.stop()


async def test_an_exception_in_decide_rejects_that_intent_alone_on_a_reloaded_projection(
        nats_url: str, database_url: str, jetstream: JetStreamContext, pool: asyncpg.Pool) -> None:
    def buggy(state: ClusterState, intent: intents.AnyIntent, now: datetime) -> list[AnyEvent]:
        events = domain.process(state, intent, now)  # the projection has moved: the loop must reload it
        if isinstance(intent, intents.RequestAllocation) and intent.spec.pod == "boom":
            raise KeyError("a bug this intent triggers")
        return events

    sent: list[intents.AnyIntent] = [register_node("n1", gpus=1), request("a", tflops=40),
                                     request("boom", tflops=40), request("b", tflops=40), request("c", tflops=40)]
    await publish(jetstream, sent)
    replica = await start_replica(nats_url, database_url=database_url, process=buggy)
    try:
        await wait_decided(pool, "req-c")
        by_id = {o.intent_id: o.types for o in (await outcomes(pool)).values()}
        assert by_id["req-boom"] == ["intent_rejected"]
        assert "KeyError" in await rejected_reason(pool, "req-boom")
        # boom's 40 TFLOPS were never taken: b fits beside a, c waits
        assert by_id["req-b"] == ["allocation_granted"] and by_id["req-c"] == ["allocation_queued"]
        assert "boom" not in replica.allocator.state.allocations
        await check_one_outcome_each(pool)
    finally:
        await replica.stop()


async def test_a_loop_without_progress_fails_readyz_and_raises_the_stuck_metric(
        nats_url: str, database_url: str, jetstream: JetStreamContext, pool: asyncpg.Pool) -> None:
    replica = await start_replica(nats_url, database_url=database_url, stuck_after_s=0.5)
    url = f"http://127.0.0.1:{replica.port}"
    try:
        await until(lambda: replica.allocator.keeper.is_leader, what="leadership")
        await pool.execute("ALTER TABLE processed_intents RENAME TO processed_away")  # a fatal error
        await messaging.publish_intent(jetstream, register_node("n1"))
        await until(lambda: replica.allocator.stuck, what="the stuck alarm")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/readyz") as response:
                assert response.status == 503
            async with http.get(f"{url}/metrics") as response:
                assert stuck_seconds(await response.text()) >= 0.5
            await pool.execute("ALTER TABLE processed_away RENAME TO processed_intents")
            await wait_decided(pool, "register-n1")
            async with http.get(f"{url}/readyz") as response:
                assert response.status == 200
                body: dict[str, Any] = await response.json()
                assert body["role"] == "leader"
    finally:
        await replica.stop()


def stuck_seconds(metrics: str) -> float:
    (line,) = [line for line in metrics.splitlines() if line.startswith("gpuledger_stuck_seconds ")]
    return float(line.split()[1])
