"""The relay's own position (real nats-server): nothing another client writes to GPULEDGER_EVENTS
stops or rewinds it, an event over NATS's max payload is skipped, and a position is derived from
the stream only when the stream's last message is the log's event."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import asyncpg
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from events import decisions, subjects
from services.allocator.adapters import database
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.adapters.relay import POSITION_HEADER, RELAY_NAME, EventRelay
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent
from services.shared import messaging

from .factory import register_node, request
from .harness import start_replica
from .outcomes import wait_decided

pytestmark = pytest.mark.integration

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FORGED_SUBJECT = subjects.event_subject("allocation_granted")


async def stream_messages(nc: NATS) -> list[tuple[dict[str, str], bytes]]:
    """(headers, data) of every GPULEDGER_EVENTS message in stream order."""
    js = nc.jetstream()
    last = int((await js.stream_info(subjects.EVENT_STREAM)).state.last_seq or 0)
    out = []
    for seq in range(1, last + 1):
        msg = await js.get_msg(subjects.EVENT_STREAM, seq)
        out.append((msg.headers or {}, msg.data or b""))
    return out


def genuine_positions(messages: list[tuple[dict[str, str], bytes]], last: int) -> list[int]:
    """Positions of the relayed messages (a decimal position header within the log)."""
    found = [headers.get(POSITION_HEADER, "") for headers, _ in messages]
    return [int(p) for p in found if p.isdigit() and int(p) <= last]


async def test_forged_events_stream_messages_neither_stop_nor_rewind_the_relay(
        nats_url: str, database_url: str, jetstream: JetStreamContext) -> None:
    forged = [{"Nats-Msg-Id": "9" * 40, POSITION_HEADER: "9" * 40}, {"Nats-Msg-Id": "not-a-number"}, None]
    for headers in forged:
        await jetstream.publish(FORGED_SUBJECT, b'{"forged": true}', headers=headers)
    pool = await database.create_pool(database_url)
    try:
        first = await start_replica(nats_url, database_url=database_url, holder="first")
        await messaging.publish_intent(jetstream, register_node("n1"))
        await messaging.publish_intent(jetstream, request("a"))
        await wait_decided(pool, "req-a")
        await first.stop()
        await jetstream.publish(FORGED_SUBJECT, b"no headers at all")  # the last message a new leader sees
        second = await start_replica(nats_url, database_url=database_url, holder="second")
        try:
            await messaging.publish_intent(jetstream, request("b"))
            await wait_decided(pool, "req-b")
            last = int(await pool.fetchval("SELECT max(position) FROM events"))
            await wait_relayed(pool, last)
        finally:
            await second.stop()
        positions = genuine_positions(await stream_messages(jetstream._nc), last)
        assert positions == list(range(1, last + 1))  # each once: the second leader republished nothing
    finally:
        await pool.close()


async def wait_relayed(pool: asyncpg.Pool, position: int, *, timeout_s: float = 60.0) -> None:
    """Wait until the relay recorded ``position`` as published (a liveness bound)."""
    deadline = time.monotonic() + timeout_s
    sql = "SELECT coalesce(max(position), 0) FROM relay_position WHERE name = $1"
    while int(await pool.fetchval(sql, RELAY_NAME)) < position:
        if time.monotonic() > deadline:
            raise AssertionError(f"relay position {position} not recorded within {timeout_s}s")
        await asyncio.sleep(0.02)


async def logged(*events: decisions.AnyEvent) -> InMemoryEventStore:
    """An in-memory log holding ``events``, one intent each."""
    leases = InMemoryLeaseStore()
    store = InMemoryEventStore(leases)
    lease = await leases.acquire("allocator", holder="t", ttl_s=60, now=NOW)
    assert lease is not None
    batch = [DecidedIntent(intent_id=f"i{n}", stream_seq=n, events=(event,)) for n, event in enumerate(events, 1)]
    await store.append(batch, lease="allocator", epoch=lease.epoch, state=ClusterState.empty())
    return store


def rejection(intent_id: str, raw: str = "") -> decisions.IntentRejected:
    return decisions.IntentRejected(at=NOW, intent_id=intent_id, reason="test", raw=raw)


async def test_an_event_over_the_max_payload_is_skipped_with_a_count_and_the_rest_is_relayed(
        jetstream: JetStreamContext) -> None:
    nc = jetstream._nc
    store = await logged(rejection("i1"), rejection("i2", raw="x" * (nc.max_payload + 1)), rejection("i3"))
    relay = EventRelay(nc, store)
    skipped: list[int] = []
    relay.on_skip = lambda: skipped.append(relay.offset)
    assert await relay.resume() == 0
    await relay.sync()
    assert relay.offset == 3 and skipped == [1]
    assert [h[POSITION_HEADER] for h, _ in await stream_messages(nc)] == ["1", "3"]
    assert await store.relay_position(RELAY_NAME) == 3


async def test_without_a_recorded_position_only_a_verified_last_message_counts(
        jetstream: JetStreamContext) -> None:
    nc = jetstream._nc
    store = await logged(rejection("i1"), rejection("i2"), rejection("i3"))
    await EventRelay(nc, store).sync()
    store.relay_positions.clear()  # a log from before relay_position existed
    assert await EventRelay(nc, store).resume() == 3  # the last message is the log's event 3
    await jetstream.publish(FORGED_SUBJECT, b"{}", headers={POSITION_HEADER: "2", "Nats-Msg-Id": "x"})
    assert await EventRelay(nc, store).resume() == 0  # claims position 2 with other content
    await store.save_relay_position(RELAY_NAME, 99)
    assert await EventRelay(nc, store).resume() == 3  # never beyond the log


async def test_a_new_events_stream_gets_the_whole_log_again(jetstream: JetStreamContext) -> None:
    nc = jetstream._nc
    store = await logged(rejection("i1"), rejection("i2"), rejection("i3"))
    await EventRelay(nc, store).sync()
    assert await store.relay_position(RELAY_NAME) == 3
    await jetstream.delete_stream(subjects.EVENT_STREAM)  # a new NATS store: the stream starts empty
    await messaging.ensure_streams(jetstream)
    relay = EventRelay(nc, store)
    assert await relay.resume() == 0
    await relay.sync()
    assert [h[POSITION_HEADER] for h, _ in await stream_messages(nc)] == ["1", "2", "3"]
    assert await store.relay_position(RELAY_NAME) == 3
