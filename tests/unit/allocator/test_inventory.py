"""Inventory: node upsert/heartbeat, Lost nodes, vanished GPUs, capacity changes (S47), node removal."""

from __future__ import annotations

from events import decisions as ev
from events import intents as it
from services.allocator.domain import expired_nodes
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, tf


def test_unchanged_report_is_a_heartbeat_and_a_change_is_a_registration() -> None:
    c = Cluster()
    (first,) = c.node("n", "p", a_gpu("g0", 100, Gi))
    (again,) = c.node("n", "p", a_gpu("g0", 100, Gi))
    changed = c.node("n", "p", a_gpu("g0", 100, Gi), labels={"zone": "a"})
    assert isinstance(first, ev.NodeRegistered) and isinstance(again, ev.NodeHeartbeat)
    assert isinstance(changed[0], ev.NodeRegistered) and c.state.nodes["n"].labels == {"zone": "a"}


def test_node_past_its_ttl_is_lost_its_gpus_are_not_chosen_and_it_comes_back() -> None:
    c = Cluster()
    c.node("old", "p", a_gpu("o0", 100, 10 * Gi), heartbeat_ttl_s=30)
    c.node("new", "p", a_gpu("n0", 100, 10 * Gi), heartbeat_ttl_s=30)
    c.request(a_request("fill", 50, Gi, pool="p"))  # makes "new" or "old" fuller; both are candidates
    c.tick(20)
    c.node("new", "p", a_gpu("n0", 100, 10 * Gi), heartbeat_ttl_s=30)
    c.tick(20)
    assert expired_nodes(c.state, c.now) == ["old"]
    out = c.send(it.CheckHeartbeats(intent_id="hb"))
    assert isinstance(out[0], ev.HeartbeatsChecked) and out[0].lost == ("old",)
    assert isinstance(out[1], ev.NodePhaseChanged) and out[1].phase == "Lost"
    for i in range(3):
        granted = c.request(a_request(f"r{i}", 10, Gi, pool="p"))
        assert isinstance(granted, ev.AllocationGranted) and granted.node == "new"
    back = c.node("old", "p", a_gpu("o0", 100, 10 * Gi), heartbeat_ttl_s=30)
    assert [type(e).__name__ for e in back] == ["NodeHeartbeat", "NodePhaseChanged"]
    assert c.state.nodes["old"].phase == "Ready"


def test_lost_node_grants_waiting_request_when_it_returns() -> None:
    c = Cluster()
    c.node("only", "p", a_gpu("g", 100, 10 * Gi), heartbeat_ttl_s=5)
    c.tick(10)
    c.send(it.CheckHeartbeats(intent_id="hb"))
    queued = c.request(a_request("r", 10, Gi, pool="p"))
    assert isinstance(queued, ev.AllocationQueued)
    assert c.filters_now("r")["NodeReadyFilter"] == 1
    out = c.node("only", "p", a_gpu("g", 100, 10 * Gi), heartbeat_ttl_s=5)
    assert isinstance(out[-1], ev.AllocationGranted) and out[-1].from_queue


def test_vanished_gpu_becomes_unknown_keeps_its_allocation_and_releases_normally() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g0", 100, 10 * Gi), a_gpu("g1", 100, 10 * Gi))
    c.request(a_request("a", 100, 10 * Gi, pool="p"))
    held = c.state.allocations["a"].gpus[0]
    other = "g1" if held == "g0" else "g0"
    out = c.node("n", "p", a_gpu(other, 100, 10 * Gi))
    phase = [e for e in out if isinstance(e, ev.GpuPhaseChanged)]
    assert phase and phase[0].gpu == held and phase[0].phase == "Unknown"
    assert c.state.allocations["a"].gpus == [held] and c.state.gpus[held].phase == "Unknown"
    assert isinstance(c.request(a_request("b", 100, 10 * Gi, pool="p")), ev.AllocationGranted)
    assert isinstance(c.request(a_request("c", 10, Gi, pool="p")), ev.AllocationQueued)
    c.release("a")
    assert c.avail(held) == (tf(100), 10 * Gi) and c.state.gpus[held].phase == "Unknown"


def test_s47_capacity_shrink_under_allocations_never_goes_negative_or_above_capacity() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 100, 40 * Gi))
    c.request(a_request("a", 80, 30 * Gi, pool="p"))
    out = c.node("n", "p", a_gpu("g", 71, 24 * Gi))
    assert any(isinstance(e, ev.GpuCapacityChanged) for e in out)
    gpu = c.state.gpus["g"]
    assert gpu.overcommitted and c.avail("g") == (0, 0)
    assert isinstance(c.request(a_request("b", 1, 1, pool="p")), ev.AllocationQueued)
    out = c.release("a")
    assert isinstance(out[-1], ev.AllocationGranted) and out[-1].spec.allocation_id == "b"
    c.release("b")
    assert c.avail("g") == (tf(71), 24 * Gi)  # release restores to capacity, not above it


def test_s47_capacity_growth_grants_queued_work() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 60, 20 * Gi))
    c.request(a_request("a", 50, 16 * Gi, pool="p"))
    assert isinstance(c.request(a_request("b", 20, 4 * Gi, pool="p")), ev.AllocationQueued)
    out = c.node("n", "p", a_gpu("g", 71, 24 * Gi))
    assert isinstance(out[-1], ev.AllocationGranted) and c.avail("g") == (tf(1), 4 * Gi)


def test_remove_node_releases_its_allocations_first() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 100, 10 * Gi))
    c.request(a_request("a", 10, Gi, pool="p"))
    out = c.send(it.RemoveNode(intent_id="rm", node="n"))
    assert [type(e).__name__ for e in out] == ["AllocationReleased", "NodeRemoved"]
    assert not c.state.gpus and not c.state.allocations and "default" not in c.state.usage
    (again,) = c.send(it.RemoveNode(intent_id="rm2", node="n"))
    assert isinstance(again, ev.IntentRejected) and again.field == "node"


def test_gpu_name_owned_by_another_node_is_rejected() -> None:
    c = Cluster()
    c.node("a", "p", a_gpu("g", 100, Gi))
    (out,) = c.node("b", "p", a_gpu("g", 100, Gi))
    assert isinstance(out, ev.IntentRejected) and out.field == "gpus[0].name"
    assert c.state.gpus["g"].node == "a" and "b" not in c.state.nodes


def test_cordoned_node_takes_no_new_work() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 100, Gi), schedulable=False)
    out = c.request(a_request("r", 1, 1, pool="p"))
    assert isinstance(out, ev.AllocationQueued)
    assert c.filters_now("r")["NodeReadyFilter"] == 1
    granted = c.node("n", "p", a_gpu("g", 100, Gi), schedulable=True)
    assert isinstance(granted[-1], ev.AllocationGranted)
