"""The loop's failure rules on the in-memory twins (no server): halving a batch isolates exactly
the intent the store refuses, an exception in ``process`` rejects that intent alone, a transient
failure naks the rest and retries in order, a fenced append steps down and appends nothing more."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from events import codec, decisions, intents
from events.decisions import AnyEvent
from services.allocator import domain
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent, StoredEvent
from tests.integration.service.factory import register_node, request

from .twin import LEASE_NOW, leading, twin, until


class RefusingStore(InMemoryEventStore):
    """Refuses, as PostgreSQL refuses a value of one intent's rows, any append that grants or queues
    pod ``poison`` (a BAD_INPUT failure: ValueError); a rejection of it is stored. Fails the next
    ``transient`` appends with ConnectionError. Counts appends and refusals."""

    def __init__(self, leases: InMemoryLeaseStore, *, transient: int = 0) -> None:
        super().__init__(leases)
        self.appends = 0
        self.refused = 0
        self.transient = transient

    async def append(self, batch: Sequence[DecidedIntent], **options: Any) -> list[StoredEvent]:
        self.appends += 1
        if self.transient:
            self.transient -= 1
            raise ConnectionError("connection to the database lost")
        if any(isinstance(event, decisions.AllocationGranted | decisions.AllocationQueued)
               and event.spec.allocation_id == "poison" for decided in batch for event in decided.events):
            self.refused += 1
            raise ValueError("value refused by the store for pod 'poison'")
        return await super().append(batch, **options)


async def test_halving_a_refused_batch_rejects_exactly_the_intent_whose_rows_are_refused() -> None:
    leases = InMemoryLeaseStore()
    store = RefusingStore(leases)
    replica = await twin(store=store, leases=leases)
    sent: list[intents.AnyIntent] = [register_node("n1", gpus=4)]
    sent += [request(f"p{i}") for i in range(9)] + [request("poison")] + [request(f"q{i}") for i in range(10)]
    for intent in sent:
        await replica.bus.publish(intent)  # all before the loop starts: one batch of 21
    await replica.start()
    try:
        await until(lambda: len(store.intents) == len(sent), what="every intent decided")
        assert replica.decided() == [i.intent_id for i in sent]
        types = {row.intent_id: row.type for row in store.rows}
        assert types["req-poison"] == "intent_rejected"
        assert [i for i in types if types[i] == "intent_rejected"] == ["req-poison"]
        assert all(types[i.intent_id] == "allocation_granted" for i in sent[1:] if i.intent_id != "req-poison")
        assert replica.allocator.watchdog.isolated._value.get() == 1
        assert store.refused >= 2 and store.appends < len(sent)  # halved, not one append per intent
    finally:
        await replica.stop()


async def test_an_exception_in_process_rejects_that_intent_alone_on_a_reloaded_projection() -> None:
    def buggy(state: ClusterState, intent: intents.AnyIntent, now: datetime) -> list[AnyEvent]:
        events = domain.process(state, intent, now)  # the projection has moved: the loop must reload it
        if isinstance(intent, intents.RequestAllocation) and intent.spec.pod == "boom":
            raise KeyError("a bug this intent triggers")
        return events

    replica = await twin(process=buggy)
    sent: list[intents.AnyIntent] = [register_node("n1", gpus=1), request("a", tflops=40), request("boom", tflops=40),
            request("b", tflops=40), request("c", tflops=40)]
    for intent in sent:
        await replica.bus.publish(intent)
    await replica.start()
    try:
        await until(lambda: "req-c" in replica.store.intents, what="the last intent decided")
        types = {row.intent_id: row.type for row in replica.store.rows}
        assert types["req-boom"] == "intent_rejected"
        (row,) = [r for r in replica.store.rows if r.intent_id == "req-boom"]
        rejected = codec.decode_event(row.data)
        assert isinstance(rejected, decisions.IntentRejected) and "KeyError" in rejected.reason
        # boom's 40 TFLOPS were never taken: b fits beside a, c waits
        assert types["req-b"] == "allocation_granted" and types["req-c"] == "allocation_queued"
        assert "boom" not in replica.allocator.state.allocations
    finally:
        await replica.stop()


async def test_a_transient_failure_naks_the_rest_and_retries_in_order_without_loss() -> None:
    leases = InMemoryLeaseStore()
    store = RefusingStore(leases, transient=3)
    replica = await twin(store=store, leases=leases, batch_size=4)
    sent = [register_node("n1")] + [request(f"p{i}") for i in range(10)]
    for intent in sent:
        await replica.bus.publish(intent)
    await replica.start()
    try:
        await until(lambda: len(store.intents) == len(sent), what="every intent decided")
        assert replica.decided() == [i.intent_id for i in sent]
        assert all(count == 1 for count in replica.first_outcomes().values())
        assert replica.bus.naked[:4] == [1, 2, 3, 4]  # the failed batch given back
        assert replica.allocator.metrics.retries._value.get() == 3
        assert replica.allocator.watchdog.isolated._value.get() == 0  # nothing blamed on an intent
    finally:
        await replica.stop()


async def test_a_fenced_append_steps_down_and_nothing_more_is_appended_until_leading_again() -> None:
    leases = InMemoryLeaseStore()
    leadership = await leading("r1", leases)
    replica = await twin(leases=leases, leadership=leadership)
    await replica.bus.publish(register_node("n1"))
    await replica.start()
    try:
        await until(lambda: "register-n1" in replica.store.intents, what="the node registered")
        taken = await leases.acquire("allocator", holder="r2", ttl_s=3600, now=LEASE_NOW + timedelta(hours=2))
        assert taken is not None and taken.epoch == 2  # another writer holds a newer epoch
        rows = len(replica.store.rows)
        await replica.bus.publish(request("p0"))
        await until(lambda: leadership.steps_down == 1, what="the step-down")
        assert not replica.allocator.keeper.is_leader
        await replica.bus.publish(request("p1"))
        await asyncio.sleep(0.2)  # many fetch rounds of a leader: a standby fetches nothing
        assert len(replica.store.rows) == rows and replica.store.intents.keys() == {"register-n1"}
        back = await leases.acquire("allocator", holder="r1", ttl_s=3600, now=LEASE_NOW + timedelta(hours=4))
        assert back is not None
        leadership.grant(back.epoch)
        await until(lambda: "req-p1" in replica.store.intents, what="leading again")
        assert replica.decided() == ["register-n1", "req-p0", "req-p1"]
        assert {row.epoch for row in replica.store.rows[rows:]} == {back.epoch}
    finally:
        await replica.stop()
