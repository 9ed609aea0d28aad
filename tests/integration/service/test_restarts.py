"""nats-server restarted, and PostgreSQL restarted, in the middle of a stream of intents: every
intent is decided exactly once, in stream order, and every event reaches GPULEDGER_EVENTS once."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from events import intents
from services.allocator.adapters import database
from services.allocator.api import views
from services.shared import messaging
from services.shared.natsserver import NatsServer, free_port
from services.shared.pgserver import PgServer

from .factory import register_node, request
from .harness import published_events, start_replica, wait_published

pytestmark = pytest.mark.integration

TOTAL = 1_500


@pytest.fixture
def own_postgres() -> Iterator[PgServer]:
    """A PostgreSQL server this test may stop and start again on the same port (its data dir is
    outside pytest's temp root, which a concurrent pytest session may re-chmod to 0700)."""
    root = Path(tempfile.mkdtemp(prefix="gpuledger-pg-"))
    server = PgServer(root / "pg", port=free_port(), durable=False).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


async def publish_all(nats_url: str, sent: list[intents.AnyIntent]) -> None:
    """Publish every intent, retrying (same msg id) through server restarts."""
    client = await messaging.connect(nats_url, name="test-publisher")
    js = client.jetstream()
    try:
        for intent in sent:
            while True:
                try:
                    await messaging.publish_intent(js, intent, timeout=1.0)
                    break
                except Exception:
                    await asyncio.sleep(0.05)
    finally:
        await client.close()


async def processed(pool: asyncpg.Pool) -> int:
    while True:
        try:
            return int(await pool.fetchval("SELECT count(*) FROM processed_intents"))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await asyncio.sleep(0.1)


async def wait_processed(pool: asyncpg.Pool, at_least: int) -> None:
    while await processed(pool) < at_least:
        await asyncio.sleep(0.02)


def workload() -> list[intents.AnyIntent]:
    sent: list[intents.AnyIntent] = [register_node(f"n{i:02}", gpus=4) for i in range(10)]
    return sent + [request(f"p{i:05}", tflops=10 + i % 30, namespace=f"ns{i % 3}") for i in range(TOTAL)]


@pytest.mark.parametrize("restart", ["nats", "postgres"])
async def test_server_restart_mid_stream_loses_and_doubles_nothing(
        restart: str, nats_server: NatsServer, own_postgres: PgServer) -> None:
    url = await asyncio.to_thread(own_postgres.create_database, "gpuledger")
    await asyncio.to_thread(database.upgrade, url)
    replica = await start_replica(nats_server.url, database_url=url)
    pool = await database.create_pool(url)
    sent = workload()
    try:
        publisher = asyncio.create_task(publish_all(nats_server.url, sent))
        await wait_processed(pool, TOTAL // 3)
        server = nats_server if restart == "nats" else own_postgres
        mid_stream = await processed(pool)
        await asyncio.to_thread(server.stop)
        assert mid_stream < len(sent), "the restart must come in the middle of the stream"
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.start)
        await publisher
        await wait_processed(pool, len(sent))
        rows = await pool.fetch("SELECT position, intent_id, type, data->>'from_queue' AS q FROM events "
                                "ORDER BY position")
        assert [r["position"] for r in rows] == list(range(1, len(rows) + 1))
        outcomes = Counter(r["intent_id"] for r in rows if r["type"] in views.OUTCOME_TYPES and r["q"] is None)
        assert all(outcomes[i.intent_id] == 1 for i in sent if isinstance(i, intents.RequestAllocation))
        order = await pool.fetch("SELECT intent_id FROM processed_intents ORDER BY stream_seq")
        assert [r[0] for r in order] == [i.intent_id for i in sent]
        client = await messaging.connect(nats_server.url)
        try:
            await wait_published(client, len(rows))
            published = await published_events(client)
        finally:
            await client.close()
        assert [int(p.msg_id) for p in published] == list(range(1, len(rows) + 1))
    finally:
        await pool.close()
        await replica.stop()
