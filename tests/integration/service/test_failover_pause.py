"""Failover cannot be blocked (allocators as real processes on PostgreSQL + nats-server): the leader
SIGSTOPped while it holds its append locks is replaced by the standby, and once resumed writes
nothing; two replicas given the same GPULEDGER_HOLDER get distinct identities, and a keeper claiming
a live holder's identity is refused."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest
from nats.js import JetStreamContext

from events import intents
from services.allocator.adapters import database
from services.allocator.adapters.leader import LeaseKeeper
from services.allocator.adapters.postgres import PostgresLeaseStore
from services.shared import messaging

from .factory import register_node, request
from .processes import AllocatorProcess
from .test_failover import check_exactly_once, check_relay_has_every_position, check_state_equals_replay, one_leader

pytestmark = pytest.mark.integration

APPEND_LOCK = """
SELECT min(a.state) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.relation = 'events'::regclass AND l.mode = 'ExclusiveLock' AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
"""The state of the writer holding the append lock (None when nobody holds it). ``active``: in the
middle of a statement, where a paused client blocks the statement itself (PostgreSQL serves
neither statement_timeout nor idle_in_transaction_session_timeout there)."""


async def publish_until(js: JetStreamContext, sent: list[intents.AnyIntent], stop: asyncio.Event,
                        most: int = 5000) -> None:
    """Publish requests (appending each to ``sent``) until ``stop`` is set or ``most`` are out, so
    the leader always has work and is often inside its append transaction when it is paused."""
    for i in range(most):
        if stop.is_set():
            return
        intent = request(f"p{i:05}", tflops=5 + i % 20, namespace=f"ns{i % 5}")
        await messaging.publish_intent(js, intent)
        sent.append(intent)


async def wait_for(pool: asyncpg.Pool, sql: str, *args: object, what: str, timeout_s: float = 60.0) -> object:
    """Poll ``sql`` until it returns a true value (a liveness bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not (value := await pool.fetchval(sql, *args)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s}s")
        await asyncio.sleep(0.02)
    return value


async def pause_holding_the_append_lock(leader: AllocatorProcess, pool: asyncpg.Pool) -> str:
    """SIGSTOP ``leader`` at a moment when it holds the append lock, inside a statement if that
    can be caught within 300 tries (the harder case), else between statements; returns which."""
    for attempt in range(1000):
        leader.pause()
        state = await pool.fetchval(APPEND_LOCK)
        if state == "active" or (state and attempt >= 300):
            return str(state)
        leader.resume()
        await asyncio.sleep(0.001 * (attempt % 7))
    raise AssertionError("never caught the leader inside its append transaction")


async def test_a_leader_paused_inside_its_append_is_replaced_and_once_resumed_writes_nothing(
        tmp_path: Path, nats_url: str, database_url: str, jetstream: JetStreamContext) -> None:
    a = AllocatorProcess("a", nats_url=nats_url, database_url=database_url, log_dir=tmp_path, GPULEDGER_HOLDER="same")
    b = AllocatorProcess("b", nats_url=nats_url, database_url=database_url, log_dir=tmp_path, GPULEDGER_HOLDER="same")
    reader = AllocatorProcess("r", nats_url=nats_url, database_url=database_url, log_dir=tmp_path,
                              module="services.allocator.reader")
    pool = await database.create_pool(database_url)
    sent: list[intents.AnyIntent] = [register_node(f"n{i:02}", gpus=8) for i in range(20)]
    stop = asyncio.Event()
    try:
        leader = await one_leader(a, b)
        standby = b if leader is a else a
        holders = {(await asyncio.to_thread(r.get, "/readyz"))["holder"] for r in (a, b)}
        assert len(holders) == 2 and all(h.startswith("same-") for h in holders)
        for node in sent:
            await messaging.publish_intent(jetstream, node)
        publisher = asyncio.create_task(publish_until(jetstream, sent, stop))
        await wait_for(pool, "SELECT count(*) >= 50 FROM processed_intents", what="50 intents decided")
        state = await pause_holding_the_append_lock(leader, pool)
        paused_at = time.time()
        old_epoch = int(await pool.fetchval("SELECT epoch FROM leases"))
        try:  # an intent published now can only be decided by the standby
            await messaging.publish_intent(jetstream, request("after-pause"))
            first = await wait_for(pool, "SELECT min(recorded_at) FROM events WHERE intent_id = 'req-after-pause' "
                                   "AND epoch > $1", old_epoch, what="the standby's first commit")
            assert isinstance(first, datetime)
            print(f"takeover: standby committed {first.timestamp() - paused_at:.2f} s after SIGSTOP ({state})")
            written_by_old = await pool.fetchval("SELECT count(*) FROM events WHERE epoch = $1", old_epoch)
        finally:
            stop.set()
            leader.resume()
        await publisher
        sent.append(request("after-pause"))
        await wait_for(pool, "SELECT count(*) >= $1 FROM processed_intents", len(sent), what="every intent decided")
        assert await pool.fetchval("SELECT count(*) FROM events WHERE epoch = $1", old_epoch) == written_by_old
        await check_exactly_once(pool, sent)
        assert (await asyncio.to_thread(standby.get, "/readyz"))["epoch"] > old_epoch  # it took over
        await check_state_equals_replay(pool, reader)
        await check_relay_has_every_position(jetstream, pool)
    finally:
        stop.set()
        await pool.close()
        for replica in (a, b, reader):
            if replica.process.poll() is None:
                assert replica.terminate() == 0, replica.log_text()[-3000:]


async def test_a_keeper_claiming_a_live_holders_identity_is_refused(pg_pool: asyncpg.Pool) -> None:
    leases = PostgresLeaseStore(pg_pool)
    first = LeaseKeeper(leases, name="allocator", holder="twin", ttl_s=2.0, renew_s=0.2)
    second = LeaseKeeper(leases, name="allocator", holder="twin", ttl_s=2.0, renew_s=0.2)
    assert await first.tick() and first.epoch == 1
    assert not await second.tick()
    assert await first.tick() and first.epoch == 1  # the live holder keeps renewing
    assert not await second.tick()
