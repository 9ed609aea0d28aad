"""``simulate`` and ``why`` show what the decision takes: in a pool with shares a request below its
share's guarantee reclaims borrowed allocations whatever their priority, where the priority
search alone finds no plan (services.allocator.api.views.taken_view)."""

from __future__ import annotations

from datetime import timedelta

from events import decisions as ev
from services.allocator import domain
from services.allocator.api import documents, reasons, simulation
from services.allocator.domain.preemption import NoPlan
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, borrowed_pool


def test_simulate_shows_the_reclaim_the_decision_makes_not_the_priority_search() -> None:
    c = borrowed_pool(qos="critical")
    c.tick(10)
    spec = a_request("b1", 100, 40 * Gi, ns="ns-b", qos="low")
    assert isinstance(domain.preemption_plan(c.state, spec, c.now), NoPlan)  # low never preempts critical
    answer = simulation.simulate_spec(c.state, spec, now=c.now)
    assert answer["outcome"]["type"] == "allocation_granted" and answer["outcome"]["preempted"]
    plan = answer["preemption"]
    assert plan["possible"] and plan["kind"] == "reclaim"
    assert [v["allocation_id"] for v in plan["victims"]] == answer["outcome"]["preempted"]
    assert all(v["reclaim"] and "reclaimed for share beta" in v["reason"] for v in plan["victims"])
    assert plan["node"] == answer["outcome"]["node"] and plan["gpus"] == answer["outcome"]["gpus"]
    assert "a1" in c.state.allocations and c.state.allocations["a1"].status == "granted"  # nothing written


def test_simulate_of_a_priority_preemption_says_priority() -> None:
    c = Cluster()
    c.node("node-0", "test-pool", a_gpu("gpu-0", 100, 40 * Gi))
    c.request(a_request("low", 100, 40 * Gi, qos="low"))
    answer = simulation.simulate_spec(c.state, a_request("crit", 50, Gi, qos="critical"), now=c.now)
    plan = answer["preemption"]
    assert plan["kind"] == "priority" and [v["allocation_id"] for v in plan["victims"]] == ["low"]
    assert plan["victims"][0]["reclaim"] is False


def test_why_of_a_request_waiting_on_the_reclaim_rate_shows_the_reclaim_once_the_minute_passed() -> None:
    c = borrowed_pool(qos="critical", reclaim_max_per_minute=1)
    c.tick(10)
    assert isinstance(c.request(a_request("b1", 100, 40 * Gi, ns="ns-b", qos="low")), ev.AllocationPreempted)
    waiting = c.request(a_request("b2", 100, 40 * Gi, ns="ns-b", qos="low"))
    assert isinstance(waiting, ev.AllocationQueued) and "reclaim_max_per_minute" in waiting.reason
    allocation = c.state.allocations["b2"]
    reason = reasons.current(c.state, allocation.spec)
    within = documents.explanation(c.state, allocation, reason, now=c.now)
    assert within["preemption"]["possible"] is False  # the rate still holds: nothing taken
    later = documents.explanation(c.state, allocation, reason, now=c.now + timedelta(seconds=61))
    plan = later["preemption"]
    assert plan["possible"] and plan["kind"] == "reclaim" and all(v["reclaim"] for v in plan["victims"])
    assert {v["allocation_id"] for v in plan["victims"]} <= {"a1", "a2", "a3"}
    assert reasons.taken_now(c.state, allocation.spec, c.now) is None
