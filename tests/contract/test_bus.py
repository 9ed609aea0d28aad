"""The bus contract (IntentSource + EventSink): the same behaviour from the in-memory twin
(MemoryBus) and the NATS JetStream adapters (IntentConsumer, EventRelay over a real nats-server).
The loop's unit tests run on the twin, so every rule they rely on is pinned here on both."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from events import codec, intents, subjects
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.adapters.memory_bus import MemoryBus
from services.allocator.adapters.nats_bus import NatsBus
from services.allocator.adapters.relay import RELAY_NAME
from services.allocator.ports import ACK, TERM, Bus, Delivery, EventSink, IntentSource, StoredEvent
from services.shared.messaging import StreamSettings
from tests.contract import scenario
from tests.integration.service.factory import register_node, request

LEASE = "allocator"


@dataclass
class BusKit:
    """One bus under test: its intent source, a way to make a new event sink over ``store``, and
    what a test needs from outside the port (delete a sequence, read what was published)."""

    name: str
    bus: Bus
    source: IntentSource
    store: InMemoryEventStore
    delete: Callable[[int], Awaitable[None]]
    published: Callable[[], Awaitable[list[int]]]
    """Log positions in GPULEDGER_EVENTS, in stream order."""

    def sink(self) -> EventSink:
        return self.bus.event_sink(self.store)


@pytest.fixture(params=["memory", pytest.param("nats", marks=pytest.mark.integration)])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[BusKit]:
    """An empty bus of the parametrised kind (a batch of at most 10; ack wait 30 s)."""
    store = InMemoryEventStore(InMemoryLeaseStore())
    if request.param == "memory":
        memory = MemoryBus()

        async def delete_memory(seq: int) -> None:
            memory.delete(seq)

        async def published_memory() -> list[int]:
            return [stored.position for stored in memory.events]

        yield BusKit("memory", memory, memory.intent_source(max_batch=10, ack_wait_s=30.0, flush_s=1.0), store,
                     delete_memory, published_memory)
        return
    server = request.getfixturevalue("nats_server")  # a sync fixture: async ones cannot be asked for here
    nats = await NatsBus.connect(server.url, streams=StreamSettings())
    js = nats.nc.jetstream()
    source = nats.intent_source(max_batch=10, ack_wait_s=30.0, flush_s=1.0)

    async def delete_nats(seq: int) -> None:
        await js.delete_msg(subjects.INTENT_STREAM, seq)

    async def published_nats() -> list[int]:
        info = await js.stream_info(subjects.EVENT_STREAM)
        if not info.state.messages:
            return []
        sub = await js.pull_subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>", stream=subjects.EVENT_STREAM)
        try:
            msgs = await sub.fetch(int(info.state.messages), timeout=5)
            return [int((msg.headers or {})["Nats-Msg-Id"]) for msg in msgs]
        finally:
            await sub.unsubscribe()

    try:
        yield BusKit("nats", nats, source, store, delete_nats, published_nats)
    finally:
        await source.close()
        await nats.close()


async def publish_all(kit: BusKit, sent: list[intents.AnyIntent]) -> list[int]:
    return [await kit.bus.publish(intent) for intent in sent]


async def fetch_n(source: IntentSource, count: int, *, timeout_s: float = 10.0) -> list[Delivery]:
    """Fetch until ``count`` deliveries came (a liveness bound, not a timing assertion)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} deliveries within {timeout_s}s"
        got += await source.fetch(wait_s=0.5)
    return got


async def settled(source: IntentSource, *, pending: int = 0, timeout_s: float = 10.0) -> None:
    """Wait until the server has applied the acks (JetStream applies them asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while await source.pending() != pending:
        assert time.monotonic() < deadline, f"pending is {await source.pending()}, not {pending}"
        await asyncio.sleep(0.02)


def requests(count: int) -> list[intents.AnyIntent]:
    return [request(f"p{i}") for i in range(count)]


async def test_a_publish_returns_the_stream_sequence_and_a_repeated_id_returns_the_first(kit: BusKit) -> None:
    assert await publish_all(kit, [register_node("n1"), request("a")]) == [1, 2]
    assert await kit.bus.publish(request("a")) == 2  # the dedupe of Nats-Msg-Id
    assert await kit.source.pending() == 0  # no consumer yet
    await kit.source.rewind()
    assert await kit.source.pending() == 2


async def test_fetch_before_a_rewind_is_refused(kit: BusKit) -> None:
    with pytest.raises(RuntimeError):
        await kit.source.fetch(wait_s=0.01)


async def test_a_rewind_starts_at_one_and_fetch_hands_out_the_stream_in_order(kit: BusKit) -> None:
    sent = requests(5)
    await publish_all(kit, sent)
    assert await kit.source.rewind() == 1
    got = await fetch_n(kit.source, 5)
    assert [d.stream_seq for d in got] == [1, 2, 3, 4, 5]
    assert [codec.decode_intent(d.data).intent_id for d in got] == [i.intent_id for i in sent]
    assert [d.msg_id for d in got] == [i.intent_id for i in sent]
    assert got[0].subject == subjects.intent_subject("request_allocation")
    assert await kit.source.fetch(wait_s=0.05) == []


async def test_one_ack_settles_every_earlier_sequence_and_a_term_is_never_redelivered(kit: BusKit) -> None:
    await publish_all(kit, requests(4))
    await kit.source.rewind()
    got = await fetch_n(kit.source, 4)
    await kit.source.settle(got, [ACK, TERM, ACK, ACK])
    await settled(kit.source)
    assert await kit.source.rewind() == 5
    assert await kit.source.fetch(wait_s=0.1) == []


async def test_what_was_not_settled_comes_again_first_and_in_order_after_a_rewind(kit: BusKit) -> None:
    await publish_all(kit, requests(5))
    await kit.source.rewind()
    got = await fetch_n(kit.source, 5)
    await kit.source.settle(got[:2], [ACK, ACK])
    await settled(kit.source, pending=3)
    assert await kit.source.rewind() == 3
    assert [d.stream_seq for d in await fetch_n(kit.source, 3)] == [3, 4, 5]


async def test_a_nak_gives_deliveries_back_for_redelivery(kit: BusKit) -> None:
    await publish_all(kit, requests(3))
    await kit.source.rewind()
    got = await fetch_n(kit.source, 3)
    await kit.source.nak(got, delay_s=0.0)
    again = await fetch_n(kit.source, 3)
    assert sorted(d.stream_seq for d in again) == [1, 2, 3]
    assert [d.data for d in sorted(again, key=lambda d: d.stream_seq)] == [d.data for d in got]


async def test_pending_counts_what_is_not_settled(kit: BusKit) -> None:
    await publish_all(kit, requests(3))
    await kit.source.rewind()
    assert await kit.source.pending() == 3
    got = await fetch_n(kit.source, 3)
    assert await kit.source.pending() == 3
    await kit.source.settle(got, [ACK, ACK, ACK])
    await settled(kit.source)


async def test_in_order_skips_deleted_sequences_and_counts_them(kit: BusKit) -> None:
    await publish_all(kit, requests(5))
    await kit.delete(3)
    await kit.source.rewind()
    got = await fetch_n(kit.source, 4)
    assert [d.stream_seq for d in got] == [1, 2, 4, 5]
    fresh, rest, skipped = await kit.source.in_order(got, 1)
    assert ([d.stream_seq for d in fresh], rest, skipped) == ([1, 2, 4, 5], [], 1)


async def test_in_order_stops_at_a_gap_that_is_not_deleted(kit: BusKit) -> None:
    await publish_all(kit, requests(5))
    await kit.source.rewind()
    got = await fetch_n(kit.source, 5)
    lost_two = [got[0], *got[2:]]
    fresh, rest, skipped = await kit.source.in_order(lost_two, 1)
    assert ([d.stream_seq for d in fresh], [d.stream_seq for d in rest], skipped) == ([1], [3, 4, 5], 0)


async def test_in_order_acks_and_drops_a_late_redelivery_below_the_expected_sequence(kit: BusKit) -> None:
    await publish_all(kit, requests(4))
    await kit.source.rewind()
    got = await fetch_n(kit.source, 4)
    fresh, rest, skipped = await kit.source.in_order(got, 3)  # 1 and 2 were committed already
    assert ([d.stream_seq for d in fresh], rest, skipped) == ([3, 4], [], 0)
    await settled(kit.source, pending=2)  # the late ones were acked


async def append_story(store: InMemoryEventStore, count: int) -> list[StoredEvent]:
    """Append the first ``count`` decided intents of the contract scenario; returns what was stored."""
    lease = await store.leases.acquire(LEASE, holder="w", ttl_s=3600, now=scenario.T0)
    assert lease is not None
    state = await store.load_state()
    batch = scenario.story()[:count]
    known = set(store.intents)
    batch = [decided for decided in batch if decided.intent_id not in known]
    return await store.append(batch, lease=LEASE, epoch=lease.epoch, state=scenario.fold_batch(state, batch))


async def run_until_published(sink: EventSink, kit: BusKit, count: int, *, timeout_s: float = 10.0) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop, idle_s=0.05))
    try:
        deadline = time.monotonic() + timeout_s
        while sink.offset < count:
            assert time.monotonic() < deadline, f"sink offset {sink.offset} < {count} within {timeout_s}s"
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.wait([task], timeout=5)


async def test_the_sink_publishes_the_log_in_order_reading_what_was_not_offered(kit: BusKit) -> None:
    sink = kit.sink()
    assert await sink.resume() == 0
    first = await append_story(kit.store, 2)
    second = await append_story(kit.store, 4)
    sink.offer(second)  # the first commit was never offered (made by an earlier leader): a gap
    total = len(first) + len(second)
    await run_until_published(sink, kit, total)
    assert await kit.published() == list(range(1, total + 1))
    assert await kit.store.relay_position(RELAY_NAME) == total


async def test_a_resumed_sink_continues_from_its_recorded_position_without_doubles(kit: BusKit) -> None:
    sink = kit.sink()
    await sink.resume()
    stored = await append_story(kit.store, 2)
    sink.offer(stored)
    await run_until_published(sink, kit, len(stored))
    again = kit.sink()
    assert await again.resume() == len(stored)
    more = await append_story(kit.store, 5)
    again.offer(more)
    total = len(stored) + len(more)
    await run_until_published(again, kit, total)
    assert await kit.published() == list(range(1, total + 1))


async def test_a_delivery_not_settled_within_the_ack_wait_comes_again(kit: BusKit) -> None:
    source = kit.bus.intent_source(max_batch=10, ack_wait_s=0.5, flush_s=1.0)
    try:
        await publish_all(kit, requests(2))
        await source.rewind()
        seen: Counter[int] = Counter()
        deadline = time.monotonic() + 10.0
        while min(seen[1], seen[2]) < 2:  # nothing settled, nothing nak'ed: the ack wait runs out
            assert time.monotonic() < deadline, f"deliveries so far: {dict(seen)}"
            seen.update(d.stream_seq for d in await source.fetch(wait_s=0.5))
        assert set(seen) == {1, 2}
    finally:
        await source.close()
