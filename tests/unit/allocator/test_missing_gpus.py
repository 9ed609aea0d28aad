"""Issue 28 item 13: a GPU discovery no longer reports leaves node and pool capacity and available
(API documents, ``status``, the ``gpuledger_pool_*`` gauges), as TensorFusion's node capacity sums only
the GPUs its node still has; the charges of allocations still on it stay allocated."""

from __future__ import annotations

from prometheus_client.registry import CollectorRegistry

from services.allocator.api import documents
from services.allocator.api.gauges import PoolCollector
from services.allocator.domain.model import MISSING, capacity_totals
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, tf


def _cluster() -> Cluster:
    c = Cluster()
    c.node("n1", "p", a_gpu("g0", 100, 40 * Gi, index=0), a_gpu("g1", 100, 40 * Gi, index=1))
    c.request(a_request("a", 30, 4 * Gi, pool="p"))
    c.node("n1", "p", a_gpu("g0", 100, 40 * Gi, index=0))  # re-registered without g1
    return c


def test_a_missing_gpu_leaves_capacity_and_available_but_its_charges_stay_allocated() -> None:
    c = _cluster()
    assert c.state.gpus["g1"].phase == MISSING
    held = c.state.allocations["a"].gpus[0]
    totals = capacity_totals(c.state.gpus.values())
    assert totals.capacity.milli_tflops == tf(100) and totals.missing == 1
    assert totals.allocated.milli_tflops == tf(30)
    assert totals.available.milli_tflops == tf(100) - (tf(30) if held == "g0" else 0)
    pool = documents.pool_doc(c.state, "p")
    assert pool["capacity"] == {"tflops": "100", "vram": "40Gi"} and pool["gpus_by_phase"] == {MISSING: 1, "Running": 1}
    node = documents.node_doc(c.state, c.state.nodes["n1"])
    assert node["capacity"] == {"tflops": "100", "vram": "40Gi"}
    (summary,) = documents.summary(c.state)["pools"]
    assert summary["capacity"]["tflops"] == "100"


def test_the_pool_gauges_leave_a_missing_gpu_out() -> None:
    c = _cluster()
    registry = CollectorRegistry()
    registry.register(PoolCollector(lambda: c.state))
    assert registry.get_sample_value("gpuledger_pool_capacity_tflops", {"pool": "p"}) == 100.0
    assert registry.get_sample_value("gpuledger_pool_capacity_vram_bytes", {"pool": "p"}) == 40 * Gi
    assert registry.get_sample_value("gpuledger_pool_allocated_tflops", {"pool": "p"}) == 30.0
