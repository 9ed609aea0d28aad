"""Isolation capabilities, the Static and Dynamic isolation policies, and failing closed on conflicts."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events import intents as it
from events.values import GpuSpec, PoolConfig
from services.allocator.api import bodies, reasons, views
from services.allocator.api.bounds import ApiError
from services.allocator.domain import ClusterState, Scheduler, digest, evolve, explain, process
from services.allocator.domain.filters.isolation_policy import CONFLICT, DynamicIsolationFilter, lock_of
from services.allocator.domain.framework import OK, Context
from services.allocator.domain.need import Need
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request

SOFT_ONLY = ("shared", "soft")


def _caps(spec: GpuSpec, caps: tuple[str, ...]) -> GpuSpec:
    return msgspec.structs.replace(spec, isolation_capabilities=caps)  # type: ignore[arg-type]


def _counts(out: ev.AnyEvent) -> dict[str, int]:
    assert isinstance(out, ev.AllocationRejected), out
    return {f.name: f.removed for f in out.filters}


def test_capabilities_without_the_mode_filter_the_gpu_and_empty_means_every_mode() -> None:
    c = Cluster()
    c.node("n", "p", _caps(a_gpu("soft-only", 100, 24 * Gi), SOFT_ONLY), a_gpu("unknown", 100, 24 * Gi))
    out = c.request(a_request("h", 10, Gi, pool="p", isolation="hard"))
    assert isinstance(out, ev.AllocationGranted) and out.gpus == ("unknown",)
    counts = {f.name: f.removed for f in explain(c.state, a_request("x", 10, Gi, pool="p", isolation="hard"))}
    assert counts["IsolationCapabilityFilter"] == 1
    assert isinstance(c.request(a_request("s", 10, Gi, pool="p", isolation="soft")), ev.AllocationGranted)


def test_a_mode_no_gpu_supports_can_never_fit() -> None:
    c = Cluster()
    c.node("n", "p", _caps(a_gpu("g", 100, 24 * Gi), SOFT_ONLY))
    out = c.request(a_request("h", 10, Gi, pool="p", isolation="hard"))
    assert isinstance(out, ev.AllocationRejected) and out.code == "unschedulable"
    assert "IsolationCapabilityFilter removed 1" in out.reason


def test_static_policy_keeps_the_discovered_mode_and_dynamic_ignores_it() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("hard-gpu", 100, 24 * Gi, mode="hard"))
    out = c.request(a_request("s", 10, Gi, pool="p", isolation="soft"))
    assert isinstance(out, ev.AllocationRejected) and _counts(out)["GPUIsolationModeFilter"] == 1
    c.pool("p", isolation_policy="dynamic")
    assert isinstance(c.request(a_request("s2", 10, Gi, pool="p", isolation="soft")), ev.AllocationGranted)


def test_dynamic_lock_follows_the_first_allocation_and_clears_when_idle() -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic")
    c.node("n", "p", a_gpu("g", 100, 24 * Gi))
    assert isinstance(c.request(a_request("soft-1", 10, Gi, pool="p", isolation="soft")), ev.AllocationGranted)
    assert isinstance(c.request(a_request("soft-2", 10, Gi, pool="p", isolation="soft")), ev.AllocationGranted)
    hard = c.request(a_request("hard-1", 10, Gi, pool="p", isolation="hard"))
    assert isinstance(hard, ev.AllocationQueued) and c.filters_now("hard-1")["DynamicIsolationFilter"] == 1
    assert ("DynamicIsolationFilter", 1) in [(f.name, f.removed) for f in reasons.current(c.state, hard.spec).filters]
    assert lock_of(c.state.gpus["g"], c.state.allocations) == "soft"
    c.release("soft-1")
    assert c.state.allocations["hard-1"].status == "queued"  # still locked by soft-2
    events = c.release("soft-2")
    assert isinstance(events[-1], ev.AllocationGranted) and events[-1].spec.allocation_id == "hard-1"
    assert lock_of(c.state.gpus["g"], c.state.allocations) == "hard"
    assert isinstance(c.request(a_request("soft-3", 10, Gi, pool="p", isolation="soft")), ev.AllocationQueued)
    assert c.replayed_digest() == digest(c.state)


def test_dynamic_modes_share_a_node_on_different_gpus_and_shared_locks_its_gpu() -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic", placement="compact-first")  # compact would stack them on one GPU
    c.node("n", "p", a_gpu("g1", 100, 24 * Gi), a_gpu("g2", 100, 24 * Gi), a_gpu("g3", 100, 24 * Gi))
    soft = c.request(a_request("soft", 10, Gi, pool="p", isolation="soft"))
    hard = c.request(a_request("hard", 10, Gi, pool="p", isolation="hard"))
    assert isinstance(soft, ev.AllocationGranted) and isinstance(hard, ev.AllocationGranted)
    assert soft.gpus != hard.gpus
    shared = c.request(a_request("whole", 10, Gi, pool="p", isolation="shared"))
    assert isinstance(shared, ev.AllocationGranted)
    assert {soft.gpus[0], hard.gpus[0], shared.gpus[0]} == {"g1", "g2", "g3"}
    assert lock_of(c.state.gpus[shared.gpus[0]], c.state.allocations) == "shared"


def test_conflicting_modes_found_on_replay_fail_the_gpu_closed() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 100, 24 * Gi))
    c.request(a_request("soft", 10, Gi, pool="p", isolation="soft"))
    c.request(a_request("hard", 10, Gi, pool="p", isolation="hard"))  # static policy, mode "": both fit
    c.pool("p", isolation_policy="dynamic")
    replayed = ClusterState.empty()
    for event in c.events:
        evolve(replayed, event)
    assert lock_of(replayed.gpus["g"], replayed.allocations) == CONFLICT
    for state in (c.state, replayed):
        counts = {f.name: f.removed for f in explain(state, a_request("x", 10, Gi, pool="p", isolation="soft"))}
        assert counts["IsolationConflictFilter"] == 1
    out = process(replayed, it.RequestAllocation(intent_id="late", spec=a_request("late", 10, Gi, pool="p")),
                  c.now, Scheduler())
    assert isinstance(out[0], ev.AllocationQueued)
    now = reasons.current(replayed, out[0].spec)
    assert ("IsolationConflictFilter", 1) in [(f.name, f.removed) for f in now.filters]
    assert views.gpu_view(c.state.gpus["g"], c.state.allocations)["isolation_lock"] == CONFLICT
    c.request(a_request("late", 10, Gi, pool="p", isolation="soft"))
    events = c.release("hard")  # the conflict drains: the GPU is soft again, the queued soft request fits
    assert isinstance(events[-1], ev.AllocationGranted) and events[-1].spec.allocation_id == "late"


def test_dynamic_policy_refuses_partitioned_and_an_unknown_holder_fails_closed() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 100, 24 * Gi))
    c.request(a_request("soft", 10, Gi, pool="p"))
    dynamic = PoolConfig(isolation_policy="dynamic")
    gpu, f = c.state.gpus["g"], DynamicIsolationFilter()
    assert f.filter(gpu, Need(a_request("x", 10, pool="p", isolation="partitioned")), Context(dynamic)).code \
        == "UnschedulableAndUnresolvable"
    soft = Need(a_request("x", 10, pool="p"))
    assert f.filter(gpu, soft, Context(dynamic, allocations=c.state.allocations)) is OK
    assert f.filter(gpu, soft, Context(dynamic)) is not OK  # holder unknown without the allocations
    assert f.filter(gpu, soft, Context(PoolConfig())) is OK  # static policy: no lock


def test_pool_settings_are_validated() -> None:
    c = Cluster()
    for field, value in (("isolation_policy", "Dynamic"), ("topology", "strict"), ("max_topology_tier", 4),
                         ("max_topology_tier", -1)):
        (out,) = c.pool("p", **{field: value})
        assert isinstance(out, ev.IntentRejected) and out.field == f"config.{field}" and out.value == str(value)
    (ok,) = c.pool("p", isolation_policy="dynamic", topology="hard", max_topology_tier=1)
    assert isinstance(ok, ev.PoolConfigured)


def test_api_pool_body_takes_the_settings_and_names_a_bad_field() -> None:
    body = {"isolation_policy": "dynamic", "topology": "hard", "max_topology_tier": 1}
    config = bodies.pool_config(body, PoolConfig())
    assert (config.isolation_policy, config.topology, config.max_topology_tier) == ("dynamic", "hard", 1)
    assert bodies.pool_config({}, PoolConfig()) == PoolConfig()
    assert bodies.pool_config({}, config) == config  # a field left out keeps the pool's value
    assert bodies.pool_config({"max_topology_tier": None}, config).max_topology_tier == PoolConfig().max_topology_tier
    tier = "max_topology_tier"
    for body, field in (({"isolation_policy": "Static"}, "isolation_policy"), ({"topology": 1}, "topology"),
                        ({tier: 4}, tier), ({tier: True}, tier)):
        with pytest.raises(ApiError) as caught:
            bodies.pool_config(body, PoolConfig())
        assert caught.value.status == 400 and caught.value.field == field


ops = st.lists(st.tuples(st.sampled_from(["soft", "soft", "hard", "shared", "release"]), st.integers(0, 7),
                         st.integers(1, 2), st.sampled_from([0, 5, 30, 60])), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops, st.sampled_from(["compact-first", "node-compact-gpu-low-load", "fgd"]))
def test_a_dynamic_pool_never_mixes_modes_on_a_gpu_and_replays_its_locks(
        steps: list[tuple[str, int, int, int]], placement: str) -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic", placement=placement)
    c.node("a", "p", *(a_gpu(f"a{i}", 100, 40 * Gi) for i in range(3)))
    c.node("b", "p", *(a_gpu(f"b{i}", 100, 40 * Gi) for i in range(2)))
    for op, uid, count, tflops in steps:
        if op == "release":
            c.release(f"u{uid}")
        elif f"u{uid}" not in c.state.allocations:
            c.request(a_request(f"u{uid}", tflops, Gi, pool="p", count=count, isolation=op))
        locks = {g.name: lock_of(g, c.state.allocations) for g in c.state.gpus.values()}
        assert CONFLICT not in locks.values()
        for a in c.state.allocations.values():
            assert all(locks[g] == a.spec.isolation for g in a.gpus)
    assert c.replayed_digest() == digest(c.state)


def test_a_dynamic_pool_can_never_place_a_partitioned_request() -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic")
    c.node("n", "p", a_gpu("g", 700, 80 * Gi, model="A100_SXM_80G"))
    out = c.request(a_request("mig", 100, Gi, pool="p", isolation="partitioned"))
    assert isinstance(out, ev.AllocationRejected) and "DynamicIsolationFilter removed 1" in out.reason
    c.pool("p", isolation_policy="static")
    assert isinstance(c.request(a_request("mig2", 100, Gi, pool="p", isolation="partitioned")), ev.AllocationGranted)
