"""The dashboard's reads of the projection (services/allocator/dashboard/reads.py) and of the log
(lives) on states driven through the real domain and the in-memory event store (the quality
series: test_quality_timeline.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events import intents as it
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api import lives
from services.allocator.dashboard import reads
from services.allocator.ports import DecidedIntent
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, res


def _cluster() -> Cluster:
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi), a_gpu("n1-g1", 100, 16 * Gi, model="H100"))
    c.node("n2", "p", a_gpu("n2-g0", 100, 16 * Gi))
    c.node("m1", "q", a_gpu("m1-g0", 50, 8 * Gi))
    return c


def test_share_is_the_scarcer_dimension_and_classes_follow_quarters() -> None:
    c = _cluster()
    c.request(a_request("a", 5, 6 * Gi, pool="q"))
    assert reads.used_share(c.state.gpus["m1-g0"]) == 0.75  # VRAM 6 of 8 GiB beats TFLOPS 5 of 50
    assert [reads.share_class(s) for s in (0.0, 0.01, 0.25, 0.26, 0.75, 0.99, 1.0)] == [0, 1, 2, 2, 4, 4, 5]


def test_pools_sum_capacity_use_lost_nodes_and_queue() -> None:
    c = _cluster()
    c.request(a_request("a", 100, 16 * Gi, pool="p", gpu_models=("A100",)))
    c.request(a_request("b", 30, 1 * Gi, pool="p", gpu_models=("A100",)))
    c.request(a_request("c", 100, 16 * Gi, pool="p", gpu_models=("H100",)))  # the one H100, whole
    c.request(a_request("d", 100, 16 * Gi, pool="p", gpu_models=("H100",)))  # queued behind c
    c.node("n2", "p", a_gpu("n2-g0", 100, 16 * Gi), heartbeat_ttl_s=1.0)
    c.tick(5)
    c.send(it.CheckHeartbeats(intent_id="hb"))
    p, q = reads.pools(c.state)
    assert (p.name, p.nodes, p.lost_nodes, p.queued, q.name, q.queued) == ("p", 2, 1, 1, "q", 0)
    assert p.capacity_milli_tflops == 300_000 and p.used_milli_tflops == 230_000
    assert p.used_vram_bytes == 33 * Gi
    assert (p.quality.gpus, p.quality.full, p.quality.fragmented, p.quality.idle) == (3, 2, 1, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 120), st.integers(0, 20)), max_size=12))
def test_quality_invariants(asks: list[tuple[int, int]]) -> None:
    c = _cluster()
    for i, (tflops, vram) in enumerate(asks):
        c.request(a_request(f"r{i}", tflops, vram * Gi, pool="p"))
    gpus = [g for g in c.state.gpus.values() if g.pool == "p"]
    quality = reads.quality_of(gpus)
    assert quality.idle + quality.full + quality.fragmented == quality.gpus == 3
    assert 0.0 <= quality.fragmentation_pct <= quality.unallocated_pct <= 100.0
    assert (quality.unallocated_pct == 100.0) == (quality.idle == 3)
    assert (quality.fragmentation_pct > 0) == (quality.fragmented > 0)


def test_gpu_map_filters() -> None:
    c = _cluster()
    c.request(a_request("a", 50, 1 * Gi, pool="p", gpu_models=("H100",)))
    c.request(a_request("b", 50, 8 * Gi, pool="q"))

    def names(**kw: str) -> list[str]:
        return [cell.name for group in reads.gpu_map(c.state, reads.MapFilter(**kw)) for cell in group.cells]

    assert names() == ["n1-g0", "n1-g1", "n2-g0", "m1-g0"]
    assert names(pool="q") == ["m1-g0"]
    assert names(model="H100") == ["n1-g1"]
    assert names(node="n") == ["n1-g0", "n1-g1", "n2-g0"]
    assert names(show="fragmented") == ["n1-g1"]
    assert names(show="full") == ["m1-g0"]
    assert names(show="idle") == ["n1-g0", "n2-g0"]
    assert names(show="lost") == []


def test_queue_is_in_grant_order_and_explains_the_first_ones() -> None:
    c = _cluster()
    c.pool("q", preemption="off")  # critical and high would preempt "fill" otherwise
    c.request(a_request("fill", 50, 8 * Gi, pool="q"))
    for uid, qos in (("low-1", "low"), ("high-1", "high"), ("low-2", "low"), ("critical-1", "critical")):
        c.request(a_request(uid, 50, 8 * Gi, pool="q", qos=qos))
    waiting, total = reads.queue(c.state, explain=2)
    assert total == 4
    assert [w.allocation.spec.allocation_id for w in waiting] == ["critical-1", "high-1", "low-1", "low-2"]
    assert [w.rank for w in waiting] == [1, 2, 3, 4]
    assert waiting[0].explanation.startswith("0/1 GPUs fit in pool q:") and waiting[0].code_now == "capacity"
    assert not waiting[2].explanation and not waiting[2].code_now
    c.release("fill")  # the queue drains: critical-1 takes the GPU, the others still wait
    assert [w.allocation.spec.allocation_id for w in reads.queue(c.state)[0]] == ["high-1", "low-1", "low-2"]
    page, _ = reads.queue(c.state, offset=2, limit=1)
    assert [(w.rank, w.allocation.spec.allocation_id) for w in page] == [(3, "low-2")]


async def _stored(c: Cluster) -> InMemoryEventStore:
    leases = InMemoryLeaseStore()
    lease = await leases.acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
    assert lease is not None
    store = InMemoryEventStore(leases)
    for i, event in enumerate(c.events):
        await store.append([DecidedIntent(intent_id=f"i{i}", stream_seq=i + 1, events=(event,))],
                           lease="allocator", epoch=lease.epoch, state=c.state)
    return store


async def test_an_allocation_life_from_the_log_in_order() -> None:
    c = _cluster()
    c.request(a_request("fill", 50, 8 * Gi, pool="q"))
    c.request(a_request("w", 50, 8 * Gi, pool="q"))
    c.release("fill")
    c.resize("w", res(40, 4 * Gi), res(50, 8 * Gi))
    c.release("w")
    store = await _stored(c)
    steps = lives.steps(await lives.events_of(store, "w"))
    assert [s.type for s in steps] == ["allocation_queued", "allocation_granted", "allocation_resized",
                                       "allocation_released"]
    assert [s.position for s in steps] == sorted(s.position for s in steps)
    assert "0/1 GPUs fit in pool q" in steps[0].text and "(from the queue)" in steps[1].text
    assert steps[1].node == "m1" and "request 40 TFLOPS, 4 GiB VRAM" in steps[2].text
    assert [s.type for s in lives.steps(await lives.events_of(store, "fill"))] == [
        "allocation_granted", "allocation_released"]
    assert await lives.events_of(store, "nobody") == []
    assert len(await lives.events_of(store, "w", limit=2)) == 2


def test_describe_names_what_happened() -> None:
    rejected = ev.AllocationRejected(at=datetime.now(UTC), spec=a_request("x", 1, 1, pool="p"), reason="too big",
                                     code="unschedulable")
    assert lives.describe(rejected) == "rejected (unschedulable): too big"
    left = ev.AllocationReleased(at=datetime.now(UTC), allocation_id="x", namespace="n", pod="x", pool="p",
                                 was_queued=True, reason="pod deleted")
    assert lives.describe(left) == "left the queue: pod deleted"
