"""The allocator loop on a real nats-server with the in-memory store twins: order, exactly-once,
poison messages, redelivery after commit, transient store failures, relay contents."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import pytest
from nats.js import JetStreamContext

from events import codec, decisions, subjects
from services.allocator.adapters.consumer import IntentConsumer
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.views import OUTCOME_TYPES
from services.allocator.ports import Action, DecidedIntent, Delivery, StoredEvent
from services.shared import messaging

from .factory import register_node, request
from .harness import Replica, published_events, start_reader, start_replica, until, wait_published

pytestmark = pytest.mark.integration


@pytest.fixture
def leases() -> InMemoryLeaseStore:
    return InMemoryLeaseStore()


@pytest.fixture
def store(leases: InMemoryLeaseStore) -> InMemoryEventStore:
    return InMemoryEventStore(leases)


@pytest.fixture
async def replica(nats_url: str, store: InMemoryEventStore, leases: InMemoryLeaseStore,
                  jetstream: JetStreamContext) -> AsyncIterator[Replica]:
    running = await start_replica(nats_url, store=store, leases=leases)
    await until(lambda: running.allocator.keeper.is_leader, what="leadership")
    yield running
    await running.stop()


def outcome_counts(events: Sequence[Any]) -> Counter[str]:
    """Outcome events per intent id (a RequestAllocation must have exactly one)."""
    return Counter(p.intent_id for p in events
                   if codec.tag_of(p.event) in OUTCOME_TYPES and not getattr(p.event, "from_queue", False))


async def test_intents_are_decided_committed_and_relayed_in_order(
        replica: Replica, jetstream: JetStreamContext, store: InMemoryEventStore) -> None:
    await messaging.publish_intent(jetstream, register_node("n1", gpus=2))
    for i in range(50):
        await messaging.publish_intent(jetstream, request(f"p{i}", tflops=10))
    await until(lambda: len(store.intents) == 51, what="51 intents decided")
    await wait_published(jetstream._nc, len(store.rows))
    published = await published_events(jetstream._nc)
    assert [int(p.msg_id) for p in published] == list(range(1, len(store.rows) + 1))
    assert [codec.tag_of(p.event) for p in published] == [row.type for row in store.rows]
    granted = [p.event for p in published if isinstance(p.event, decisions.AllocationGranted)]
    assert len(granted) == 20  # 2 GPUs x 100 TFLOPS / 10 TFLOPS
    assert outcome_counts(published) == {f"req-p{i}": 1 for i in range(50)}


async def test_duplicate_publishes_yield_one_decision(
        replica: Replica, jetstream: JetStreamContext, store: InMemoryEventStore) -> None:
    await messaging.publish_intent(jetstream, register_node("n1"))
    intent = request("dup")
    await messaging.publish_intent(jetstream, intent)
    await messaging.publish_intent(jetstream, intent)  # same Nats-Msg-Id: JetStream drops it
    # beyond the dedupe window: a new msg id, same intent id -> only the processed index catches it
    await jetstream.publish(subjects.intent_subject("request_allocation"), codec.encode(intent),
                            headers={"Nats-Msg-Id": "another-id"})
    await messaging.publish_intent(jetstream, request("after"))
    await until(lambda: "req-after" in store.intents, what="last intent decided")
    assert replica.allocator.metrics.duplicates._value.get() == 1
    types = [row.type for row in store.rows if row.intent_id == "req-dup"]
    assert types == ["allocation_granted"]


async def test_poison_message_becomes_intent_rejected_and_is_terminated(
        replica: Replica, jetstream: JetStreamContext, store: InMemoryEventStore) -> None:
    await jetstream.publish(subjects.intent_subject("request_allocation"), b"\x00not an intent",
                            headers={"Nats-Msg-Id": "poison-1"})
    await messaging.publish_intent(jetstream, register_node("n1"))
    await until(lambda: "register-n1" in store.intents, what="intent after the poison decided")
    (row,) = [r for r in store.rows if r.intent_id == "poison-1"]
    event = codec.decode_event(row.data)
    assert isinstance(event, decisions.IntentRejected)
    assert event.subject == "gpuledger.intent.request_allocation"
    assert event.raw == "\ufffdnot an intent"  # NUL replaced: JSONB cannot hold it
    assert replica.allocator.metrics.decisions.labels(type="intent_rejected")._value.get() == 1


async def test_redelivery_between_commit_and_ack_yields_no_second_decision(
        replica: Replica, jetstream: JetStreamContext, store: InMemoryEventStore) -> None:
    consumer = replica.allocator.consumer
    assert isinstance(consumer, IntentConsumer)
    real_settle = consumer.settle
    calls = {"n": 0}

    async def settle_failing_twice(msgs: Sequence[Delivery], actions: Sequence[Action]) -> None:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError("connection lost after commit, before ack")
        await real_settle(msgs, actions)

    consumer.settle = settle_failing_twice  # type: ignore[method-assign,assignment]
    await messaging.publish_intent(jetstream, register_node("n1"))
    for i in range(20):
        await messaging.publish_intent(jetstream, request(f"p{i}"))
    await until(lambda: len(store.intents) == 21, what="21 intents decided")
    await until(lambda: calls["n"] >= 3, what="redelivered batch settled")
    for _ in range(100):  # the server applies acks asynchronously
        if await consumer.ack_floor() == 21:
            break
        await asyncio.sleep(0.05)
    assert await consumer.ack_floor() == 21
    per_intent = Counter(row.intent_id for row in store.rows)
    assert all(count == 1 for count in per_intent.values())
    assert replica.allocator.metrics.duplicates._value.get() >= 1  # the redelivered batch was skipped


async def test_transient_store_failure_retries_in_order_without_loss(
        replica: Replica, jetstream: JetStreamContext, store: InMemoryEventStore) -> None:
    real_append = store.append
    failures = {"left": 3}

    async def flaky_append(batch: Sequence[DecidedIntent], **kwargs: Any) -> list[StoredEvent]:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise ConnectionError("database connection reset")
        return await real_append(batch, **kwargs)

    store.append = flaky_append  # type: ignore[method-assign]
    await messaging.publish_intent(jetstream, register_node("n1", gpus=1))
    for i in range(30):
        await messaging.publish_intent(jetstream, request(f"p{i}", tflops=10))
    await until(lambda: len(store.intents) == 31, what="31 intents decided")
    assert failures["left"] == 0
    order = [intent_id for intent_id, _ in sorted(store.intents.items(), key=lambda kv: kv[1][0])]
    assert order == ["register-n1", *[f"req-p{i}" for i in range(30)]]
    seqs = [seq for seq, _ in sorted(store.intents.values())]
    assert seqs == list(range(1, 32))
    granted = [row.intent_id for row in store.rows if row.type == "allocation_granted"]
    assert granted == [f"req-p{i}" for i in range(10)]  # FIFO: the first ten fit, in stream order


async def test_the_writer_serves_probes_and_a_reader_the_api(
        replica: Replica, jetstream: JetStreamContext, store: InMemoryEventStore, nats_url: str) -> None:
    await messaging.publish_intent(jetstream, register_node("n1", gpus=2))
    await messaging.publish_intent(jetstream, request("a", tflops=30))
    await until(lambda: "req-a" in store.intents, what="request decided")
    reader = await start_reader(nats_url, store=store, history=store)
    try:
        await until(lambda: reader.position == len(store.rows), what="the reader caught up")
        await _probe_and_read(f"http://127.0.0.1:{replica.port}", f"http://127.0.0.1:{reader.port}")
    finally:
        await reader.stop()
    assert len(store.intents) == 2  # simulate wrote nothing


async def _probe_and_read(writer: str, base: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{writer}/readyz") as r:
            assert r.status == 200 and (await r.json())["role"] == "leader"
        async with http.get(f"{writer}/metrics") as r:
            text = await r.text()
        assert 'gpuledger_decisions_total{type="allocation_granted"} 1.0' in text
        assert "gpuledger_lease_epoch 1.0" in text and "gpuledger_intents_pending" in text
        async with http.get(f"{writer}/api/v1/gpus") as r:
            assert r.status == 404  # the writer serves no reads
        async with http.get(f"{base}/readyz") as r:
            assert r.status == 200 and (await r.json()) == {"role": "reader", "position": 2, "head": 2, "lag": 0}
        async with http.get(f"{base}/api/v1/gpus") as r:
            gpus = (await r.json())["items"]
        assert [g["name"] for g in gpus] == ["n1-gpu0", "n1-gpu1"]
        assert sorted(g["available"]["tflops"] for g in gpus) == ["100", "70"]
        async with http.get(f"{base}/api/v1/allocations?status=granted") as r:
            (allocation,) = (await r.json())["items"]
        assert allocation["allocation_id"] == "a" and allocation["request"]["tflops"] == "30"
        async with http.get(f"{base}/api/v1/allocations?status=bogus") as r:
            assert r.status == 400 and (await r.json())["field"] == "status"
        async with http.post(f"{base}/api/v1/simulate", data=SIM_POD, headers=YAML) as r:
            simulated = await r.json()
        assert simulated["outcome"]["type"] == "allocation_granted" and simulated["outcome"]["position"] is None
        assert {f["name"] for f in simulated["filters"]}
        async with http.post(f"{base}/api/v1/simulate",
                             data=SIM_POD.replace('"10"', '"ten"'), headers=YAML) as r:
            assert r.status == 400 and (await r.json())["field"] == "tensor-fusion.ai/tflops-request"


async def test_sigterm_style_stop_hands_over_to_the_standby_without_loss(
        nats_url: str, store: InMemoryEventStore, leases: InMemoryLeaseStore, jetstream: JetStreamContext) -> None:
    first = await start_replica(nats_url, store=store, leases=leases, holder="first")
    second = await start_replica(nats_url, store=store, leases=leases, holder="second")
    await until(lambda: first.allocator.keeper.is_leader, what="first leads")
    assert second.allocator.keeper.role == "standby"
    await messaging.publish_intent(jetstream, register_node("n1", gpus=4))
    for i in range(100):
        await messaging.publish_intent(jetstream, request(f"p{i}", tflops=5))
        if i == 50:
            await first.stop()  # releases the lease
    await until(lambda: len(store.intents) == 101, what="every intent decided")
    assert second.allocator.keeper.is_leader and second.allocator.keeper.epoch == 2
    assert Counter(row.intent_id for row in store.rows) == {"register-n1": 1, **{f"req-p{i}": 1 for i in range(100)}}
    await second.stop()


YAML = {"Content-Type": "application/yaml"}
"""The Pod routes take YAML only when it says so (a web page cannot send it without a preflight)."""

SIM_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: sim
  namespace: team-a
  annotations: {tensor-fusion.ai/tflops-request: "10", tensor-fusion.ai/vram-request: 1Gi}
spec: {containers: [{name: main}]}
"""
