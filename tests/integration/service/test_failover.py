"""Leader election and failover with allocators as real processes on PostgreSQL + nats-server:
one leader of two; kill -9 of the leader in the middle of 5,000 intents loses and doubles nothing,
and the survivor's state equals a replay of the log."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import asyncpg
import pytest
from nats.js import JetStreamContext

from events import intents
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.api import documents, views
from services.shared import messaging

from .factory import register_node, request
from .harness import published_events, wait_published
from .processes import AllocatorProcess, wait_ready

pytestmark = pytest.mark.integration

NODES = 40
REQUESTS = 5_000


async def count(pool: asyncpg.Pool, sql: str) -> int:
    return int(await pool.fetchval(sql))


async def roles(*replicas: AllocatorProcess) -> list[str]:
    docs = await asyncio.to_thread(wait_ready, *replicas)
    return [doc["role"] for doc in docs]


async def one_leader(*replicas: AllocatorProcess) -> AllocatorProcess:
    for _ in range(400):
        found = await roles(*replicas)
        if found.count("leader") == 1 and found.count("standby") == len(replicas) - 1:
            return replicas[found.index("leader")]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no single leader: {found}")


async def publish_workload(js: JetStreamContext) -> list[intents.AnyIntent]:
    sent: list[intents.AnyIntent] = [register_node(f"n{i:03}", gpus=8) for i in range(NODES)]
    sent += [request(f"p{i:05}", tflops=5 + i % 40, vram_gib=1 + i % 8, namespace=f"ns{i % 7}")
             for i in range(REQUESTS)]
    for intent in sent:
        await messaging.publish_intent(js, intent)
    return sent


async def test_kill_9_of_the_leader_mid_stream_loses_and_doubles_nothing(
        tmp_path: Path, nats_url: str, database_url: str, jetstream: JetStreamContext) -> None:
    a = AllocatorProcess("a", nats_url=nats_url, database_url=database_url, log_dir=tmp_path)
    b = AllocatorProcess("b", nats_url=nats_url, database_url=database_url, log_dir=tmp_path)
    reader = AllocatorProcess("r", nats_url=nats_url, database_url=database_url, log_dir=tmp_path,
                              module="services.allocator.reader")
    pool = await database.create_pool(database_url)
    try:
        leader = await one_leader(a, b)
        standby = b if leader is a else a
        publisher = asyncio.create_task(publish_workload(jetstream))
        while await count(pool, "SELECT count(*) FROM processed_intents") < 1_500:
            await asyncio.sleep(0.02)
        leader.kill()
        sent = await publisher
        assert await one_leader(standby) is standby
        while await count(pool, "SELECT count(*) FROM processed_intents") < len(sent):
            await asyncio.sleep(0.1)
        await check_exactly_once(pool, sent)
        await check_state_equals_replay(pool, reader)  # a reader that followed the log across the kill
        await check_relay_has_every_position(jetstream, pool)
        assert (await asyncio.to_thread(standby.get, "/readyz"))["epoch"] >= 2
    finally:
        await pool.close()
        for replica in (a, b, reader):
            if replica.process.poll() is None:
                assert replica.terminate() == 0, replica.log_text()[-3000:]


async def check_exactly_once(pool: asyncpg.Pool, sent: list[intents.AnyIntent]) -> None:
    rows = await pool.fetch("SELECT intent_id, type, data->>'from_queue' AS q FROM events ORDER BY position")
    outcomes = Counter(r["intent_id"] for r in rows if r["type"] in views.OUTCOME_TYPES and r["q"] is None)
    requests = [i.intent_id for i in sent if isinstance(i, intents.RequestAllocation)]
    assert all(outcomes[intent_id] == 1 for intent_id in requests), "an intent lacks or repeats its outcome"
    assert await count(pool, "SELECT count(*) FROM processed_intents") == len(sent)
    positions = [r[0] for r in await pool.fetch("SELECT position FROM events ORDER BY position")]
    assert positions == list(range(1, len(positions) + 1))


async def check_state_equals_replay(pool: asyncpg.Pool, reader: AllocatorProcess) -> None:
    replayed = documents.summary(await PostgresEventStore(pool).load_state())
    for _ in range(200):
        live = await asyncio.to_thread(reader.get, "/api/v1/status")
        if live["position"] == replayed["position"]:
            break
        await asyncio.sleep(0.05)
    assert live == replayed


async def check_relay_has_every_position(js: JetStreamContext, pool: asyncpg.Pool) -> None:
    last = await count(pool, "SELECT max(position) FROM events")
    await wait_published(js._nc, last)
    published = await published_events(js._nc)
    assert [int(p.msg_id) for p in published] == list(range(1, last + 1))
