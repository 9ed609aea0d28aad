"""Hypothesis on the in-memory twins: whatever the bus and the store do (deliveries lost in
flight, deleted sequences, failed fetches/gap checks/acks/naks/rewinds, failed appends, reconnects, the same
intent republished under another msg id), every intent the stream still holds is decided exactly
once, and intents are decided in stream order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import codec, intents
from services.allocator.adapters.memory import InMemoryLeaseStore
from services.allocator.adapters.memory_bus import MemoryBus
from services.allocator.ports import DecidedIntent, StoredEvent
from tests.integration.service.factory import register_node, request

from .test_loop_isolation import RefusingStore
from .twin import twin, until

Step = tuple[str, int]
STEPS = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 6)),
    st.tuples(st.just("lose"), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.integers(0, 8)),
    st.tuples(st.sampled_from(["fetch", "in_order", "settle", "nak", "rewind"]), st.integers(1, 2)),
    st.tuples(st.just("append"), st.integers(1, 2)),
    st.tuples(st.just("reconnect"), st.just(0)),
    st.tuples(st.just("republish"), st.integers(0, 8)),
    st.tuples(st.just("pause"), st.integers(0, 3)),
), min_size=1, max_size=12)


class CountingStore(RefusingStore):
    """Also records every appended intent id (a second decision would show up here)."""

    def __init__(self, leases: InMemoryLeaseStore) -> None:
        super().__init__(leases)
        self.appended: list[str] = []

    async def append(self, batch: Sequence[DecidedIntent], **options: Any) -> list[StoredEvent]:
        stored = await super().append(batch, **options)
        self.appended += [decided.intent_id for decided in batch]
        return stored


async def scenario(steps: list[Step]) -> None:
    leases = InMemoryLeaseStore()
    store = CountingStore(leases)
    bus = MemoryBus()
    replica = await twin(bus=bus, store=store, leases=leases, batch_size=4, ack_wait_s=0.2)
    seq_of: dict[str, int] = {}
    deleted: set[int] = set()
    count = 0

    async def publish(intent: intents.AnyIntent) -> None:
        seq_of.setdefault(intent.intent_id, await bus.publish(intent))

    await publish(register_node("n1", gpus=2))
    await replica.start()
    try:
        for kind, n in steps:
            if kind == "publish":
                for _ in range(n):
                    await publish(request(f"p{count}"))
                    count += 1
            elif kind == "lose":
                bus.lose(bus.last_seq + 1 + n)
            elif kind == "delete" and n + 2 <= bus.last_seq:
                bus.delete(n + 2)  # never the node
                deleted.add(n + 2)
            elif kind in ("fetch", "in_order", "settle", "nak", "rewind"):
                bus.fail(kind, ConnectionError(f"{kind} lost the connection"), times=n)  # type: ignore[arg-type]
            elif kind == "append":
                store.transient += n
            elif kind == "reconnect":
                bus.reconnect()
            elif kind == "republish" and n < count:
                bus.publish_raw(codec.encode(request(f"p{n}")), msg_id=f"again-{n}-{bus.last_seq}")
            elif kind == "pause":
                await asyncio.sleep(0.01 * n)
        expected = {i for i, seq in seq_of.items() if seq not in deleted}
        last = max(seq_of[i] for i in expected)
        await until(lambda: expected <= set(store.intents) and bus.ack_floor >= last,
                    what=f"after {steps}: every intent still in the stream decided (missing "
                         f"{sorted(expected - set(store.intents))}, ack floor {bus.ack_floor}, seqs {seq_of})")
        assert set(store.intents) <= set(seq_of)  # nothing invented
        assert len(store.appended) == len(set(store.appended))  # decided once
        order = [store.intents[i][0] for i in replica.decided()]  # the stream seq each was decided from
        assert order == sorted(order)  # in stream order
    finally:
        await replica.stop()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_every_intent_still_in_the_stream_is_decided_once_in_order_whatever_fails(steps: list[Step]) -> None:
    asyncio.run(scenario(steps))
