"""After nats-server restarts, the leader commits again as soon as intents arrive (real nats-server on
PostgreSQL): the ack and fetch paths give up on the vanished server quickly instead of waiting out
long flush or request timeouts. The time to the first commit is reported, not asserted
(BENCHMARKS.md)."""

from __future__ import annotations

import asyncio
import time

import pytest

from events import intents
from services.allocator.adapters import database
from services.shared import messaging
from services.shared.natsserver import NatsServer

from .factory import register_node, request
from .harness import start_replica
from .outcomes import wait_decided

pytestmark = pytest.mark.integration


async def publish_retrying(url: str, intent: intents.AnyIntent) -> None:
    """Connect and publish ``intent``, retrying while the server is coming back."""
    client = await messaging.connect(url, name="test-publisher")
    try:
        while True:
            try:
                await messaging.publish_intent(client.jetstream(), intent, timeout=0.5)
                return
            except Exception:
                await asyncio.sleep(0.02)
    finally:
        await client.close()


async def publish_all(url: str, sent: list[intents.AnyIntent]) -> None:
    for intent in sent:
        await publish_retrying(url, intent)


async def test_the_first_commit_after_a_nats_server_restart_mid_stream_comes_once_it_is_back(
        nats_server: NatsServer, database_url: str) -> None:
    # the default back-off (0.2 s doubling to 5 s): a reconnect must cut a long back-off short
    replica = await start_replica(nats_server.url, database_url=database_url, retry_delay_s=0.2, retry_max_s=5.0)
    pool = await database.create_pool(database_url)
    sent: list[intents.AnyIntent] = [register_node("n1", gpus=8)]
    sent += [request(f"p{i}") for i in range(400)]
    count = "SELECT count(*) FROM processed_intents"
    try:
        publisher = asyncio.create_task(publish_all(nats_server.url, sent))
        while await pool.fetchval(count) < 50:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(nats_server.stop)  # while the leader fetches, commits and acks
        await asyncio.sleep(2.0)  # long enough for the back-off to reach a second
        await asyncio.to_thread(nats_server.start)
        back, before = time.monotonic(), await pool.fetchval(count)
        deadline = back + 30
        while await pool.fetchval(count) == before:
            assert time.monotonic() < deadline, "no commit within 30 s of nats-server being back"
            await asyncio.sleep(0.01)
        print(f"first commit {time.monotonic() - back:.2f} s after nats-server was back")
        await publisher
        await wait_decided(pool, "req-p399")
        rows = await pool.fetch("SELECT intent_id FROM processed_intents ORDER BY stream_seq")
        assert [r[0] for r in rows] == [i.intent_id for i in sent]
    finally:
        await pool.close()
        await replica.stop()
