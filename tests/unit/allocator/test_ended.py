"""How an allocation that is no longer live ended, from the log (in-memory store twin)."""

from __future__ import annotations

from datetime import UTC, datetime

from events import decisions as ev
from events.values import AllocationSpec, Resources
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.ended import ended_life, sentence
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ONE = Resources(milli_tflops=1000, vram_bytes=2**30)


def _spec(allocation_id: str, pod: str) -> AllocationSpec:
    return AllocationSpec(allocation_id=allocation_id, namespace="ns", pod=pod, pool="p", request=ONE, limit=ONE)


async def _store(*events: ev.AnyEvent) -> InMemoryEventStore:
    leases = InMemoryLeaseStore()
    lease = await leases.acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
    assert lease is not None
    store = InMemoryEventStore(leases)
    for i, event in enumerate(events):
        await store.append([DecidedIntent(intent_id=f"i{i}", stream_seq=i + 1, events=(event,))],
                           lease="allocator", epoch=lease.epoch, state=ClusterState())
    return store


async def test_preempted_withdrawn_and_unknown() -> None:
    store = await _store(
        ev.AllocationGranted(at=NOW, spec=_spec("a", "web-0"), node="n", gpus=("g",), charges=(ONE,)),
        ev.AllocationPreempted(at=NOW, allocation_id="a", namespace="ns", pod="web-0", pool="p", node="n",
                               gpus=("g",), preemptor="b", preemptor_namespace="ns", preemptor_pod="train",
                               priority=0, preemptor_priority=10000),
        ev.AllocationQueued(at=NOW, spec=_spec("q", "wait"), reason="full", code="capacity"),
        ev.AllocationReleased(at=NOW, allocation_id="q", namespace="ns", pod="wait", pool="p", was_queued=True,
                              reason="pod deleted"),
    )
    preempted = await ended_life(store, "a")
    assert preempted is not None and preempted["status"] == "preempted" and preempted["preemptor"] == "b"
    assert preempted["reason"] == "preempted by ns/train (priority 10000 over 0)" and preempted["position"] == 2
    assert await ended_life(store, "ns/web-0") == preempted  # the pod's newest allocation
    withdrawn = await ended_life(store, "q")
    assert withdrawn is not None and withdrawn["was_queued"] and withdrawn["reason"] == "left the queue: pod deleted"
    assert sentence("q", withdrawn).startswith("allocation 'q' is not live: released at 2026-")
    assert await ended_life(store, "nobody") is None
    assert sentence("nobody", None) == "allocation 'nobody' is not live (no allocation has this id)"
