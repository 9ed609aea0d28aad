"""The loop's delivery rules on the in-memory bus (no server): stream order, rewind after a
reconnect, deleted sequences skipped, a redelivered intent decided once, relay order."""

from __future__ import annotations

import asyncio

from events import codec, decisions
from services.allocator.adapters.memory_bus import MemoryBus
from tests.integration.service.factory import register_node, request

from .twin import twin, until


async def test_intents_are_decided_once_each_in_stream_order_and_relayed_in_log_order() -> None:
    replica = await twin()
    sent = [register_node("n1", gpus=2)] + [request(f"p{i}") for i in range(50)]
    for intent in sent:
        await replica.bus.publish(intent)
    await replica.start()
    try:
        await until(lambda: len(replica.store.intents) == len(sent), what="every intent decided")
        assert replica.decided() == [i.intent_id for i in sent]
        assert replica.first_outcomes() == {f"req-p{i}": 1 for i in range(50)}
        granted = [r for r in replica.store.rows if r.type == "allocation_granted"]
        assert len(granted) == 20  # 2 GPUs x 100 TFLOPS / 10 TFLOPS
        await until(lambda: replica.bus.offset == len(replica.store.rows), what="relay caught up")
        assert [e.position for e in replica.bus.events] == list(range(1, len(replica.store.rows) + 1))
        assert replica.bus.ack_floor == len(sent) and await replica.bus.pending() == 0
    finally:
        await replica.stop()


async def test_a_gap_in_a_fetch_naks_the_rest_and_rewinds_so_the_lost_delivery_comes_first() -> None:
    bus = MemoryBus(ack_wait_s=3600.0)  # never by ack-wait: only a rewind can bring it back
    replica = await twin(bus=bus, batch_size=4)
    await bus.publish(register_node("n1", gpus=4))
    await replica.start()
    try:
        await until(lambda: "register-n1" in replica.store.intents, what="the node registered")
        rewinds = bus.rewinds
        bus.lose(2)  # the next delivery of seq 2 is lost in flight
        sent = [request(f"p{i}") for i in range(8)]
        for intent in sent:
            await bus.publish(intent)
        await until(lambda: len(replica.store.intents) == 9, what="every intent decided")
        assert replica.decided() == ["register-n1"] + [i.intent_id for i in sent]
        assert bus.rewinds > rewinds
        assert bus.naked[:3] == [3, 4, 5]  # the rest of the fetch (seq 2 was lost) given back, not decided
    finally:
        await replica.stop()


async def test_a_reconnect_rewinds_so_a_delivery_lost_in_flight_is_not_left_to_the_ack_wait() -> None:
    bus = MemoryBus(ack_wait_s=3600.0)
    replica = await twin(bus=bus)
    await bus.publish(register_node("n1"))
    await replica.start()
    try:
        await until(lambda: "register-n1" in replica.store.intents, what="the node registered")
        bus.lose(2)
        await bus.publish(request("last"))  # nothing after it reveals the gap
        await until(lambda: 2 in bus.in_flight, what="seq 2 delivered and lost")
        await asyncio.sleep(0.1)  # several fetch rounds: without a rewind it would wait an hour
        assert "req-last" not in replica.store.intents
        bus.reconnect()
        await until(lambda: "req-last" in replica.store.intents, what="the lost intent decided after the reconnect")
        assert replica.decided() == ["register-n1", "req-last"]
    finally:
        await replica.stop()


async def test_deleted_sequences_are_skipped_and_counted_not_waited_for() -> None:
    replica = await twin()
    sent = [register_node("n1")] + [request(f"p{i}") for i in range(5)]
    for intent in sent:
        await replica.bus.publish(intent)
    replica.bus.delete(3)
    replica.bus.delete(4)
    await replica.start()
    try:
        await until(lambda: len(replica.store.intents) == 4, what="the remaining intents decided")
        assert replica.decided() == ["register-n1", "req-p0", "req-p3", "req-p4"]
        assert replica.allocator.watchdog.gaps._value.get() == 2
    finally:
        await replica.stop()


async def test_an_intent_redelivered_after_its_commit_is_decided_once() -> None:
    replica = await twin()
    replica.bus.fail("settle", ConnectionError("connection lost after commit, before ack"), times=2)
    sent = [register_node("n1")] + [request(f"p{i}") for i in range(10)]
    for intent in sent:
        await replica.bus.publish(intent)
    await replica.start()
    try:
        await until(lambda: replica.bus.ack_floor == len(sent), what="every intent acked")
        assert replica.decided() == [i.intent_id for i in sent]
        assert all(count == 1 for count in replica.first_outcomes().values())
        assert replica.allocator.metrics.duplicates._value.get() >= 1  # the redelivered batch was skipped
    finally:
        await replica.stop()


async def test_the_same_intent_under_another_message_id_is_decided_once() -> None:
    replica = await twin()
    intent = request("dup")
    await replica.bus.publish(register_node("n1"))
    await replica.bus.publish(intent)
    replica.bus.publish_raw(codec.encode(intent), msg_id="another-id")  # beyond the dedupe window
    await replica.bus.publish(request("after"))
    await replica.start()
    try:
        await until(lambda: "req-after" in replica.store.intents, what="the last intent decided")
        assert [r.type for r in replica.store.rows if r.intent_id == "req-dup"] == ["allocation_granted"]
        assert replica.allocator.metrics.duplicates._value.get() == 1
    finally:
        await replica.stop()


async def test_a_poison_message_is_rejected_terminated_and_never_redelivered() -> None:
    replica = await twin()
    replica.bus.publish_raw(b"\x00not an intent", msg_id="poison-1")
    await replica.bus.publish(register_node("n1"))
    await replica.start()
    try:
        await until(lambda: replica.bus.ack_floor == 2, what="both settled")
        (row,) = [r for r in replica.store.rows if r.intent_id == "poison-1"]
        assert isinstance(codec.decode_event(row.data), decisions.IntentRejected)
        assert replica.bus.deliveries == 2
    finally:
        await replica.stop()
