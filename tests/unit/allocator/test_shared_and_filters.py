"""Shared whole-GPU isolation (S39-S41), isolation modes, filter primitives (S53), node affinity semantics."""

from __future__ import annotations

import pytest

from events import decisions as ev
from events.values import NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm
from services.allocator.domain import explain
from services.allocator.domain.filters.affinity import requirement_matches
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, tf


def test_s40_shared_takes_and_restores_the_whole_gpu() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("gpu-1", 100, 24 * Gi))
    out = c.request(a_request("s", 10, 2 * Gi, pool="p", isolation="shared"))
    assert isinstance(out, ev.AllocationGranted) and c.avail("gpu-1") == (0, 0)
    second = c.request(a_request("t", 10, 2 * Gi, pool="p", isolation="shared"))
    assert isinstance(second, ev.AllocationQueued)
    assert c.filters_now("t")["SharedWholeGPUFilter"] == 1
    events = c.release("s")
    assert c.state.allocations["t"].status == "granted" and isinstance(events[-1], ev.AllocationGranted)
    c.release("t")
    assert c.avail("gpu-1") == (tf(100), 24 * Gi)


def test_s41_shared_filter_keeps_only_idle_gpus_in_any_runtime_mode() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("gpu-full", 100, 24 * Gi, mode="soft"), a_gpu("gpu-partial", 100, 24 * Gi, mode="hard"))
    c.request(a_request("x", 10, 0, pool="p", isolation="hard"))
    assert c.state.allocations["x"].gpus == ["gpu-partial"]
    out = c.request(a_request("s", 10, 2 * Gi, pool="p", isolation="shared"))
    assert isinstance(out, ev.AllocationGranted) and out.gpus == ("gpu-full",)


def test_s39_isolation_mode_filter_static_policy() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("soft-gpu", 100, 24 * Gi, mode="soft"), a_gpu("hard-gpu", 100, 24 * Gi, mode="hard"),
           a_gpu("any-gpu", 100, 24 * Gi))
    counts = {f.name: f.removed for f in explain(c.state, a_request("h", 10, Gi, pool="p", isolation="hard"))}
    assert counts["GPUIsolationModeFilter"] == 1  # soft-gpu; "" and "hard" pass


def test_s53_filter_chain_counts_each_removal_once_in_order() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g1", 10, 40 * Gi, index=0), a_gpu("g2", 5, 20 * Gi, index=1),
           a_gpu("g3", 20, 80 * Gi, model="H100", phase="Pending", index=2),
           a_gpu("g4", 3, 24 * Gi, model="RTX4090", index=3))
    counts = {f.name: f.removed for f in explain(c.state, a_request("r", 8, 30 * Gi, pool="p"))}
    assert counts["PhaseFilter"] == 1 and counts["ResourceFilter"] == 2
    counts = {f.name: f.removed for f in explain(c.state, a_request("r", 1, Gi, pool="p", gpu_indices=(2, 3)))}
    assert counts["PhaseFilter"] == 1 and counts["GPUIndexFilter"] == 2 and counts["ResourceFilter"] == 0


def test_gpu_used_by_another_device_plugin_is_never_a_candidate() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g", 100, Gi, used_by="nvidia-device-plugin"))
    out = c.request(a_request("r", 1, 1, pool="p"))
    assert isinstance(out, ev.AllocationRejected) and out.code == "unschedulable"


def req(key: str, op: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=op, values=values)


@pytest.mark.parametrize(
    ("requirement", "labels", "expected"),
    [
        (req("zone", "In", "a", "b"), {"zone": "a"}, True),
        (req("zone", "In", "a"), {}, False),
        (req("zone", "NotIn", "a"), {}, True),
        (req("zone", "NotIn", "a"), {"zone": "a"}, False),
        (req("gpu", "Exists"), {"gpu": ""}, True),
        (req("gpu", "DoesNotExist"), {"gpu": "x"}, False),
        (req("cores", "Gt", "8"), {"cores": "16"}, True),
        (req("cores", "Lt", "8"), {"cores": "16"}, False),
        (req("cores", "Gt", "8"), {"cores": "many"}, False),
        (req("cores", "Foo", "8"), {"cores": "16"}, False),
    ],
)
def test_node_selector_requirement_semantics(requirement: NodeSelectorRequirement, labels: dict[str, str],
                                             expected: bool) -> None:
    assert requirement_matches(requirement, labels) is expected


def two_zone_cluster() -> Cluster:
    c = Cluster()
    c.node("a-node", "p", a_gpu("a0", 100, 10 * Gi), labels={"zone": "a"})
    c.node("b-node", "p", a_gpu("b0", 100, 10 * Gi), labels={"zone": "b"})
    return c


def test_required_affinity_terms_are_ored_and_filter_whole_nodes() -> None:
    c = two_zone_cluster()
    affinity = NodeAffinity(required=(NodeSelectorTerm(match_expressions=(req("zone", "In", "b"),)),
                                      NodeSelectorTerm(match_expressions=(req("zone", "In", "c"),))))
    out = c.request(a_request("r", 1, Gi, pool="p", node_affinity=affinity))
    assert isinstance(out, ev.AllocationGranted) and out.node == "b-node"
    counts = {f.name: f.removed for f in explain(c.state, a_request("s", 1, Gi, pool="p", node_affinity=affinity))}
    assert counts["NodeAffinityFilter"] == 1


def test_preferred_affinity_outranks_the_strategy_score() -> None:
    c = two_zone_cluster()
    c.request(a_request("fill", 50, 5 * Gi, pool="p", node_affinity=NodeAffinity(
        required=(NodeSelectorTerm(match_expressions=(req("zone", "In", "a"),)),))))
    prefer_b = NodeAffinity(preferred=(PreferredSchedulingTerm(
        weight=10, preference=NodeSelectorTerm(match_expressions=(req("zone", "In", "b"),))),))
    plain = c.request(a_request("r1", 1, Gi, pool="p"))
    preferred = c.request(a_request("r2", 1, Gi, pool="p", node_affinity=prefer_b))
    assert isinstance(plain, ev.AllocationGranted) and plain.node == "a-node"  # fuller node first
    assert isinstance(preferred, ev.AllocationGranted) and preferred.node == "b-node"


def test_node_cpu_and_memory_are_checked_when_both_sides_report_them() -> None:
    c = Cluster()
    c.node("small", "p", a_gpu("s0", 100, 10 * Gi), cpu_milli=4000, memory_bytes=8 * Gi)
    c.node("big", "p", a_gpu("b0", 100, 10 * Gi), cpu_milli=64000, memory_bytes=256 * Gi)
    c.request(a_request("fill", 90, Gi, pool="p", node_affinity=None))
    out = c.request(a_request("r", 1, Gi, pool="p", cpu_milli=8000, memory_bytes=16 * Gi))
    assert isinstance(out, ev.AllocationGranted) and out.node == "big"
    assert c.state.nodes["big"].used_cpu_milli == 8000
    c.release("r")
    assert c.state.nodes["big"].used_cpu_milli == 0


def test_max_workers_per_node_caps_granted_allocations() -> None:
    c = Cluster()
    c.pool("p", max_workers_per_node=1)
    c.node("n", "p", a_gpu("g0", 100, 10 * Gi), a_gpu("g1", 100, 10 * Gi))
    assert isinstance(c.request(a_request("a", 1, Gi, pool="p")), ev.AllocationGranted)
    out = c.request(a_request("b", 1, Gi, pool="p"))
    assert isinstance(out, ev.AllocationQueued)
    assert c.filters_now("b")["MaxWorkersPerNodeFilter"] == 2
    grants = c.release("a")
    assert isinstance(grants[-1], ev.AllocationGranted) and grants[-1].spec.allocation_id == "b"


def test_a_request_for_a_model_the_pool_lacks_is_told_the_models_the_pool_has() -> None:
    c = Cluster()
    c.node("n1", "p", a_gpu("g0", 100, 16 * Gi, model="H100_SXM"), a_gpu("g1", 100, 16 * Gi, model="A100_SXM_80G"))
    c.node("other", "q", a_gpu("q0", 100, 16 * Gi, model="L4"))
    out = c.request(a_request("x", 10, Gi, pool="p", gpu_models=("A100_SXM4_80GB",)))
    assert isinstance(out, ev.AllocationRejected) and out.code == "unschedulable"
    assert out.reason.startswith("can never fit: 0/2 GPUs fit in pool p: GPUModelFilter removed 2; ")
    assert "GPU models asked: A100_SXM4_80GB; pool p has: A100_SXM_80G, H100_SXM " in out.reason  # not q's L4
    # a request the models do not stop is not told about them
    assert "GPU models" not in c.request(a_request("y", 500, Gi, pool="p")).reason  # type: ignore[union-attr]
