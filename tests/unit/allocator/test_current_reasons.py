"""services.allocator.api.reasons: the current reason is what the domain would decide now."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events import intents
from events.values import AllocationSpec, PoolConfig, QuotaAmount, QuotaSpec, Resources
from services.allocator import domain
from services.allocator.api import reasons
from services.allocator.domain.state import ClusterState
from tests.integration.service.factory import register_node, request

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def apply(state: ClusterState, *items: intents.AnyIntent) -> list[ev.AnyEvent]:
    out: list[ev.AnyEvent] = []
    for intent in items:
        out.extend(domain.process(state, intent, NOW))
    return out


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=120), min_size=1, max_size=12),
       quota_tflops=st.one_of(st.none(), st.integers(min_value=1, max_value=300)))
def test_a_fresh_queued_request_gets_the_reason_of_its_queued_event(sizes: list[int], quota_tflops: int | None) -> None:
    state = ClusterState.empty()
    apply(state, register_node("n1", gpus=2))
    if quota_tflops is not None:
        amount = QuotaAmount(milli_tflops=quota_tflops * 1000)
        apply(state, intents.SetQuota(intent_id="q", namespace="team-a", spec=QuotaSpec(total_requests=amount)))
    for i, size in enumerate(sizes):
        events = apply(state, request(f"p{i}", tflops=size))
        queued = [e for e in events if isinstance(e, ev.AllocationQueued)]
        if queued:
            now = reasons.current(state, queued[0].spec)
            assert (now.code, now.reason, now.quota_dimension) == (
                queued[0].code, queued[0].reason, queued[0].quota_dimension)
            # the event carries no per-filter counts (the writer's hot path); the current reason does
            assert queued[0].filters == () and now.filters == tuple(domain.explain(state, queued[0].spec))


def test_freed_capacity_behind_a_quota_changes_the_reason_and_fits_when_nothing_blocks() -> None:
    state = ClusterState.empty()
    apply(state, register_node("n1", gpus=1), request("a", tflops=40),
          request("b", tflops=60, namespace="team-b"), request("c", tflops=50))
    spec = state.allocations["c"].spec
    assert reasons.current(state, spec).code == "capacity"
    apply(state, intents.SetQuota(intent_id="q", namespace="team-a",
                                  spec=QuotaSpec(total_requests=QuotaAmount(milli_tflops=50_000))))
    apply(state, intents.ReleaseAllocation(intent_id="r", allocation_id="b"))
    now = reasons.current(state, spec)
    assert now.code == "quota" and now.quota_dimension and state.allocations["c"].code == "capacity"
    # the probe decides on the state without touching it
    assert reasons.PROBE_ID not in state.allocations and state.allocations["c"].status == "queued"


def test_a_request_that_fits_now_says_where() -> None:
    state = ClusterState.empty()
    apply(state, register_node("n1", gpus=1))
    spec = AllocationSpec(allocation_id="x", namespace="ns", pod="x", pool="default",
                          request=Resources(milli_tflops=1000), limit=Resources(milli_tflops=1000))
    now = reasons.current(state, spec)
    assert now.code == "fits" and now.node == "n1" and now.gpus == ("n1-gpu0",)


def test_dirty_scope_marks_pools_namespaces_or_everything() -> None:
    spec = msgspec.structs.replace(request("a").spec, pool="p", namespace="ns")
    granted = ev.AllocationGranted(at=NOW, spec=spec, node="n", gpus=("g",), charges=(Resources(),))
    released = ev.AllocationReleased(at=NOW, allocation_id="b", namespace="ns2", pod="b", pool="p2")
    scope = reasons.dirty_scope([granted, released, ev.QuotaSet(at=NOW, namespace="ns3", spec=QuotaSpec()),
                                 ev.AllocationQueued(at=NOW, spec=spec, reason="r", code="capacity")])
    assert (scope.everything, scope.pools, scope.namespaces) == (False, {"p", "p2"}, {"ns", "ns2", "ns3"})
    assert not reasons.dirty_scope([ev.NodeHeartbeat(at=NOW, node="n", pool="p")]).covers(spec)
    assert not reasons.dirty_scope([ev.HeartbeatsChecked(at=NOW)]).covers(spec)
    assert reasons.dirty_scope([ev.HeartbeatsChecked(at=NOW, pools=("p",))]).pools == {"p"}  # a protection ended
    assert reasons.dirty_scope([ev.PoolConfigured(at=NOW, pool="x", config=PoolConfig())]).everything
