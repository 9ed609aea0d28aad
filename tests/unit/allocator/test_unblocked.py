"""Time-based blocks are retried when they end (domain/unblocked.py): an eviction protection, a
reclaim minimum runtime or a reclaim rate window that ends in a pool with queued requests makes the
liveness tick due, and the CheckHeartbeats it publishes names the pool in HeartbeatsChecked.pools,
so the queue drain retries it (preemptions and reclaims as a release would trigger them)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from events import codec
from events import decisions as ev
from events import intents as it
from services.allocator.domain import Scheduler, digest, unblocked
from services.allocator.domain.process import Hints, drain, process
from services.allocator.domain.state import decode_snapshot, encode_snapshot
from services.allocator.domain.victims import PROTECTION_KEY
from services.allocator.loop.liveness import check_heartbeats, due
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, a_share, borrowed_pool


def _one_gpu_pool(**pool_kw: object) -> Cluster:
    c = Cluster()
    if pool_kw:
        c.pool("p", **pool_kw)
    c.node("n", "p", a_gpu("g", 100, 16 * Gi))
    return c


def _check(c: Cluster) -> list[ev.AnyEvent]:
    return c.send(it.CheckHeartbeats(intent_id=f"hb-{len(c.events)}"))


def _preempted(events: list[ev.AnyEvent]) -> list[str]:
    return [e.allocation_id for e in events if isinstance(e, ev.AllocationPreempted)]


def _granted(events: list[ev.AnyEvent]) -> list[str]:
    return [e.spec.allocation_id for e in events if isinstance(e, ev.AllocationGranted)]


def test_a_protection_that_ends_makes_the_tick_due_and_the_check_preempts_for_the_waiting_request() -> None:
    c = _one_gpu_pool()
    c.request(a_request("victim", 100, 16 * Gi, pool="p", qos="low", attributes={PROTECTION_KEY: "30m"}))
    c.tick(60)
    waiting = c.request(a_request("crit", 100, 16 * Gi, pool="p", qos="critical"))
    assert isinstance(waiting, ev.AllocationQueued) and "protected" in waiting.reason
    c.tick(20 * 60)
    assert unblocked.pools(c.state, c.now) == () and not due(c.state, c.now)  # still protected
    assert _check(c) == [ev.HeartbeatsChecked(at=c.now)]  # nothing to retry: no drain
    c.tick(9 * 60)  # the protection ended at T0 + 30 min, one minute ago
    assert unblocked.pools(c.state, c.now) == ("p",) and due(c.state, c.now)
    before = encode_snapshot(c.state)
    out = _check(c)
    assert out[0] == ev.HeartbeatsChecked(at=c.now, pools=("p",))
    assert _preempted(out) == ["victim"] and _granted(out) == ["crit"]
    assert c.state.checked_at == c.now and not due(c.state, c.now)
    assert c.replayed_digest() == digest(c.state)
    resumed = decode_snapshot(before)  # a replica resumed from a snapshot decides the same
    assert process(resumed, it.CheckHeartbeats(intent_id="again"), c.now, Scheduler()) == out
    assert digest(resumed) == digest(c.state)


def test_a_protection_counts_only_where_a_waiting_request_could_preempt_it_and_only_once() -> None:
    c = _one_gpu_pool()
    c.request(a_request("victim", 100, 16 * Gi, pool="p", qos="low", attributes={PROTECTION_KEY: "1m"}))
    c.request(a_request("medium", 100, 16 * Gi, pool="p", qos="medium"))  # medium never preempts low
    c.tick(120)
    assert unblocked.pools(c.state, c.now) == ()
    c.request(a_request("crit", 100, 16 * Gi, pool="p", qos="critical"))  # preempts at once: protection ended
    assert c.state.allocations["crit"].status == "granted"
    c.request(a_request("high", 100, 16 * Gi, pool="p", qos="high", attributes={PROTECTION_KEY: "1m"}))
    c.tick(10)
    assert not due(c.state, c.now)  # both wait for capacity, not for time
    c.tick(3600)
    assert not due(c.state, c.now)  # a waiting request's own protection unblocks nothing


def test_an_idle_pool_makes_the_tick_publish_nothing() -> None:
    c = _one_gpu_pool()
    c.request(a_request("victim", 100, 16 * Gi, pool="p", qos="low", attributes={PROTECTION_KEY: "1m"}))
    c.tick(3600)
    assert unblocked.pools(c.state, c.now) == () and not due(c.state, c.now)  # the protection ended, no queue


def test_preemption_off_names_no_pool() -> None:
    c = _one_gpu_pool(preemption="off")
    c.request(a_request("victim", 100, 16 * Gi, pool="p", qos="low", attributes={PROTECTION_KEY: "1m"}))
    c.request(a_request("crit", 100, 16 * Gi, pool="p", qos="critical"))
    c.tick(3600)
    assert unblocked.pools(c.state, c.now) == ()



def test_a_reclaim_minimum_runtime_that_ends_is_retried_by_the_check() -> None:
    c = borrowed_pool(reclaim_min_runtime_s=60)
    c.tick(30)
    waiting = c.request(a_request("b1", 100, 40 * Gi, ns="ns-b"))
    assert isinstance(waiting, ev.AllocationQueued) and "reclaim" in waiting.reason
    assert not due(c.state, c.now)
    c.tick(30)  # exactly reclaim_min_runtime_s after the grants: eligible
    assert unblocked.pools(c.state, c.now) == ("test-pool",)
    out = _check(c)
    assert out[0] == ev.HeartbeatsChecked(at=c.now, pools=("test-pool",))
    assert len(_preempted(out)) == 1 and _granted(out) == ["b1"]
    assert c.replayed_digest() == digest(c.state)


def test_a_reclaim_rate_window_that_passes_is_retried_by_the_check() -> None:
    c = borrowed_pool(reclaim_max_per_minute=1)
    assert isinstance(c.request(a_request("b1", 100, 40 * Gi, ns="ns-b")), ev.AllocationPreempted)
    c.tick(1)
    second = c.request(a_request("b2", 100, 40 * Gi, ns="ns-b"))
    assert isinstance(second, ev.AllocationQueued) and "reclaim_max_per_minute" in second.reason
    c.tick(10)
    assert not due(c.state, c.now)  # the reclaim's minute runs
    assert _check(c) == [ev.HeartbeatsChecked(at=c.now)]
    c.tick(49)  # a minute after the reclaim
    assert unblocked.pools(c.state, c.now) == ("test-pool",)
    out = _check(c)
    assert out[0].pools == ("test-pool",)  # type: ignore[union-attr]
    assert _granted(out) == ["b2"]
    assert c.replayed_digest() == digest(c.state)


def test_a_heartbeats_checked_written_before_pools_existed_decodes_with_none() -> None:
    old = b'{"type":"heartbeats_checked","schema_version":1,"at":"2026-01-01T00:00:00Z","lost":["n"]}'
    event = codec.decode_event(old)
    assert isinstance(event, ev.HeartbeatsChecked) and event.lost == ("n",) and event.pools == ()
    assert codec.decode_event(codec.encode(ev.HeartbeatsChecked(at=event.at, pools=("p",)))).pools == ("p",)  # type: ignore[union-attr]


def test_the_last_check_time_is_in_the_snapshot() -> None:
    c = _one_gpu_pool()
    _check(c)
    assert decode_snapshot(encode_snapshot(c.state)).checked_at == c.now
    assert digest(decode_snapshot(encode_snapshot(c.state))) == digest(c.state)


PROTECTIONS = st.sampled_from([None, "1m", "5m", "12m", "30m"])


@settings(max_examples=60, deadline=None)
@given(protections=st.lists(PROTECTIONS, min_size=4, max_size=4),
       waiting=st.lists(st.sampled_from(["critical", "high", "medium"]), min_size=1, max_size=3),
       steps=st.lists(st.integers(min_value=1, max_value=600), min_size=1, max_size=12))
def test_when_the_tick_is_not_due_a_full_retry_of_the_queue_changes_nothing(
        protections: list[str | None], waiting: list[str], steps: list[int]) -> None:
    """The tick misses no block's end: whenever it is not due (and every due tick was checked), a
    drain retrying every pool decides nothing; and replay equals live at the end."""
    c = Cluster()
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi), a_gpu("n0-g1", 100, 16 * Gi))
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi), a_gpu("n1-g1", 100, 16 * Gi))
    for i, protection in enumerate(protections):
        attributes = {PROTECTION_KEY: protection} if protection else {}
        c.request(a_request(f"v{i}", 100, 16 * Gi, pool="p", qos="low", attributes=attributes))
        c.tick(30)
    for i, qos in enumerate(waiting):
        c.request(a_request(f"w{i}", 100, 16 * Gi, pool="p", qos=qos))
    for seconds in steps:
        c.tick(seconds)
        _decided_or_idle(c)
    assert c.replayed_digest() == digest(c.state)
    assert timedelta(0) <= c.now - (c.state.checked_at or c.now)


@settings(max_examples=60, deadline=None)
@given(runtime=st.sampled_from([0, 60, 300]), rate=st.sampled_from([0, 1, 2]),
       protections=st.lists(PROTECTIONS, min_size=4, max_size=4),
       gaps=st.lists(st.integers(min_value=0, max_value=120), min_size=4, max_size=4),
       waiting=st.integers(min_value=1, max_value=3),
       steps=st.lists(st.tuples(st.integers(min_value=1, max_value=400), st.booleans()), min_size=1, max_size=12))
def test_reclaim_blocks_when_the_tick_is_not_due_a_full_retry_changes_nothing(
        runtime: int, rate: int, protections: list[str | None], gaps: list[int], waiting: int,
        steps: list[tuple[int, bool]]) -> None:
    """The same for reclaim: borrowed allocations with protections, granted at different times, a
    minimum runtime and a rate bound; the share below its guarantee waits only for time, while new
    requests of it arrive (their reclaims move the rate window without retrying the queue)."""
    c = Cluster()
    c.pool("p", reclaim_min_runtime_s=runtime, reclaim_max_per_minute=rate)
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi), a_gpu("n0-g1", 100, 16 * Gi))
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi), a_gpu("n1-g1", 100, 16 * Gi))
    c.share("alpha", a_share("ns-a", pool="p", gpus=0))
    c.share("beta", a_share("ns-b", pool="p", gpus=3))
    for i, (protection, gap) in enumerate(zip(protections, gaps, strict=True)):
        attributes = {PROTECTION_KEY: protection} if protection else {}
        c.request(a_request(f"a{i}", 100, 16 * Gi, pool="p", ns="ns-a", attributes=attributes))
        c.tick(gap)
    for i in range(waiting):
        c.request(a_request(f"b{i}", 100, 16 * Gi, pool="p", ns="ns-b"))
    for n, (seconds, arrival) in enumerate(steps):
        c.tick(seconds)
        if arrival:
            c.request(a_request(f"new{n}", 100, 16 * Gi, pool="p", ns="ns-b"))
        _decided_or_idle(c)
    assert c.replayed_digest() == digest(c.state)


def _decided_or_idle(c: Cluster) -> None:
    """When the tick is due, decide its CheckHeartbeats (``_check``); when it is not, a retry of
    every pool's whole queue on a copy of the state must decide nothing."""
    if due(c.state, c.now):
        _check(c)
        return
    copy = decode_snapshot(encode_snapshot(c.state))
    hints = Hints()
    hints.pools.update(copy.pool_nodes)
    assert drain(copy, hints, c.now, Scheduler()) == []


async def _ticks(c: Cluster, ticks: int) -> list[it.AnyIntent]:
    """Run the leader's liveness loop for ``ticks`` ticks (counted by its clock reads, not by time)
    on ``c``'s state at ``c.now``; returns what it published."""
    stop = asyncio.Event()
    published: list[it.AnyIntent] = []
    reads = 0

    def now() -> datetime:
        nonlocal reads
        reads += 1
        if reads >= 2 * ticks:  # a tick reads it twice (the defrag schedules, then ``due``): this is the last
            stop.set()
        return c.now

    async def publish(intent: it.AnyIntent) -> None:
        published.append(intent)

    await check_heartbeats(stop, period_s=1e-4, is_leader=lambda: True, state=lambda: c.state, now=now,
                           publish=publish)
    return published


async def test_the_liveness_loop_publishes_check_heartbeats_once_a_protection_ended_and_nothing_when_idle() -> None:
    c = _one_gpu_pool()
    c.request(a_request("victim", 100, 16 * Gi, pool="p", qos="low", attributes={PROTECTION_KEY: "30m"}))
    assert await _ticks(c, 5) == []  # no queue
    c.request(a_request("crit", 100, 16 * Gi, pool="p", qos="critical"))
    assert await _ticks(c, 5) == []  # protected
    c.tick(30 * 60)
    published = await _ticks(c, 1)
    assert published and all(isinstance(i, it.CheckHeartbeats) for i in published)
    out = c.send(published[0])
    assert _granted(out) == ["crit"]
    assert await _ticks(c, 5) == []  # checked: nothing ended since
