"""Failover cannot be blocked by a partition: the leader (a real process) reaches PostgreSQL through
a proxy that the test cuts while the leader streams intents. The standby commits within the
documented bound; after the partition heals, the old leader writes nothing."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from sqlalchemy.engine import make_url

from events import intents
from services.allocator.adapters import database
from services.shared import messaging

from .factory import register_node, request
from .partition import PartitionProxy
from .processes import AllocatorProcess, wait_ready
from .test_failover import check_exactly_once, check_relay_has_every_position
from .test_failover_pause import wait_for

pytestmark = pytest.mark.integration


async def publish(js: JetStreamContext, sent: list[intents.AnyIntent]) -> None:
    """Publish ``sent`` in order."""
    for intent in sent:
        await messaging.publish_intent(js, intent)


async def test_a_leader_partitioned_from_postgresql_is_replaced_and_after_healing_writes_nothing(
        tmp_path: Path, nats_url: str, database_url: str, jetstream: JetStreamContext) -> None:
    proxy = await PartitionProxy(int(make_url(database.asyncpg_dsn(database_url)).port or 5432)).start()
    pool = await database.create_pool(database_url)
    a = AllocatorProcess("a", nats_url=nats_url, database_url=proxy.url(database_url), log_dir=tmp_path)
    b: AllocatorProcess | None = None
    sent: list[intents.AnyIntent] = [register_node(f"n{i:02}", gpus=8) for i in range(20)]
    sent += [request(f"p{i:04}", tflops=5 + i % 20, namespace=f"ns{i % 5}") for i in range(300)]
    try:
        await wait_for(pool, "SELECT epoch FROM leases", what="a leads")  # a starts first and leads
        b = AllocatorProcess("b", nats_url=nats_url, database_url=database_url, log_dir=tmp_path)
        await asyncio.to_thread(wait_ready, a, b)
        publisher = asyncio.create_task(publish(jetstream, sent))
        await wait_for(pool, "SELECT count(*) >= 50 FROM processed_intents", what="50 intents decided")
        proxy.cut = True
        cut_at = time.time()
        old_epoch = int(await pool.fetchval("SELECT epoch FROM leases"))
        await messaging.publish_intent(jetstream, request("after-cut"))
        first = await wait_for(pool, "SELECT min(recorded_at) FROM events WHERE intent_id = 'req-after-cut' "
                               "AND epoch > $1", old_epoch, what="the standby's first commit")
        assert isinstance(first, datetime)
        print(f"takeover: standby committed {first.timestamp() - cut_at:.2f} s after the partition")
        written_by_old = await pool.fetchval("SELECT count(*) FROM events WHERE epoch = $1", old_epoch)
        proxy.cut = False  # whatever the old leader sent meanwhile now reaches PostgreSQL
        await publisher
        sent.append(request("after-cut"))
        await wait_for(pool, "SELECT count(*) >= $1 FROM processed_intents", len(sent), what="every intent decided")
        await asyncio.sleep(1.0)  # the old leader's held statements have arrived and failed
        assert await pool.fetchval("SELECT count(*) FROM events WHERE epoch = $1", old_epoch) == written_by_old
        await check_exactly_once(pool, sent)
        await check_relay_has_every_position(jetstream, pool)
    finally:
        proxy.cut = False
        await pool.close()
        for replica in (a, b):
            if replica is not None and replica.process.poll() is None:
                assert replica.terminate() == 0, replica.log_text()[-3000:]
        await proxy.close()
