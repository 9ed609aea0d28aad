"""The queue: priority, QoS then FIFO order, best effort, queued requests leaving, re-allocation after release (S59)."""

from __future__ import annotations

from events import decisions as ev
from services.allocator.api import reasons
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request


def full_cluster() -> Cluster:
    c = Cluster()
    c.pool("p", preemption="off")  # these tests are about the queue; preemption has its own
    c.node("n", "p", a_gpu("g", 100, 10 * Gi))
    c.request(a_request("holder", 100, 10 * Gi, pool="p"))
    return c


def test_release_grants_in_qos_order_then_arrival() -> None:
    c = full_cluster()
    for uid, qos in (("low-1", "low"), ("med-1", "medium"), ("crit-1", "critical"), ("med-2", "medium")):
        assert isinstance(c.request(a_request(uid, 40, 4 * Gi, pool="p", qos=qos)), ev.AllocationQueued)
    granted = [e.spec.allocation_id for e in c.release("holder") if isinstance(e, ev.AllocationGranted)]
    assert granted == ["crit-1", "med-1"]
    granted = [e.spec.allocation_id for e in c.release("crit-1") if isinstance(e, ev.AllocationGranted)]
    assert granted == ["med-2"]


def test_a_big_queued_request_does_not_block_smaller_ones_behind_it() -> None:
    c = full_cluster()
    c.request(a_request("big", 100, 10 * Gi, pool="p", qos="high"))
    c.request(a_request("small", 10, Gi, pool="p", qos="low"))
    c.request(a_request("partial", 50, 5 * Gi, pool="p"))
    c.release("holder")
    assert c.state.allocations["big"].status == "granted"
    assert c.state.allocations["small"].status == "queued"


def test_best_effort_lets_a_fitting_lower_priority_request_through() -> None:
    c = Cluster()
    c.pool("p", preemption="off")
    c.node("n", "p", a_gpu("g", 100, 10 * Gi))
    c.request(a_request("a", 60, 6 * Gi, pool="p"))
    c.request(a_request("b", 30, 3 * Gi, pool="p"))
    c.request(a_request("big", 80, 8 * Gi, pool="p", qos="critical"))
    c.request(a_request("small", 30, 3 * Gi, pool="p", qos="low"))
    out = c.release("b")
    assert [e.spec.allocation_id for e in out if isinstance(e, ev.AllocationGranted)] == ["small"]


def test_releasing_a_queued_request_removes_it_from_the_queue() -> None:
    c = full_cluster()
    c.request(a_request("w", 10, Gi, pool="p"))
    (out,) = c.release("w")
    assert isinstance(out, ev.AllocationReleased) and out.was_queued and not out.gpus
    assert len(c.state.queue) == 0 and "w" not in c.state.allocations
    granted = c.release("holder")
    assert len(granted) == 1


def test_s59_the_same_allocation_id_can_be_granted_again_after_release() -> None:
    c = full_cluster()
    c.release("holder")
    again = c.request(a_request("holder", 10, Gi, pool="p"))
    assert isinstance(again, ev.AllocationGranted)


def test_queued_request_records_why_it_waits() -> None:
    c = full_cluster()
    out = c.request(a_request("w", 10, Gi, pool="p"))
    assert isinstance(out, ev.AllocationQueued) and out.code == "capacity"
    # the writer's reason: what the failed search knew, no filter run again (docs/allocation.md)
    assert out.reason == ("0/1 GPUs fit in pool p: no node has 1 GPU(s) that pass every filter (largest free "
                          "on one GPU: 0 TFLOPS, 0 GiB VRAM; most idle GPUs on a node: 0)")
    assert out.filters == ()
    allocation = c.state.allocations["w"]
    assert allocation.status == "queued" and allocation.reason == out.reason
    # the per-filter counts are computed when someone asks (why, the queue)
    now = reasons.current(c.state, allocation.spec)
    assert now.reason == out.reason and now.code == "capacity"
    assert [(f.name, f.removed) for f in now.filters if f.removed] == [("ResourceFilter", 1)]


def test_queued_reason_names_the_largest_free_room() -> None:
    c = full_cluster()
    c.node("m", "p", a_gpu("g2", 100, 10 * Gi), a_gpu("g3", 100, 10 * Gi))
    c.request(a_request("part", 40, 3 * Gi, pool="p"))
    out = c.request(a_request("big", 70, Gi, pool="p", count=2))
    assert isinstance(out, ev.AllocationQueued)
    assert out.reason == ("0/3 GPUs fit in pool p: no node has 2 GPU(s) that pass every filter (largest free "
                          "on one GPU: 100 TFLOPS, 10 GiB VRAM; most idle GPUs on a node: 1)")


def test_priority_class_orders_before_qos_and_equal_priorities_go_by_qos() -> None:
    c = full_cluster()
    for uid, qos, priority in (("low-1", "low", None), ("med-1", "medium", None), ("pc-500", "low", 500),
                               ("high-1", "high", None), ("med-neg", "medium", -5)):
        c.request(a_request(uid, 100, 10 * Gi, pool="p", qos=qos, priority=priority))
    # high 10000 > PriorityClass 500 > medium (0, QoS medium) > low (0, QoS low) > -5
    assert list(c.state.queue) == ["high-1", "pc-500", "med-1", "low-1", "med-neg"]
