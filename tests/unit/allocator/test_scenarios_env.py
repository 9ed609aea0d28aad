"""Allocator scenarios S01-S08, S14 on inventory ENV (deterministic variants: ties by name)."""

from __future__ import annotations

import pytest

from events import decisions as ev
from tests.unit.allocator.builders import Gi, a_request, env_cluster, tf


def test_s01_single_allocation_takes_exactly_the_request_from_the_first_gpu() -> None:
    c = env_cluster()
    out = c.request(a_request("test-pod", 50, 8 * Gi))
    assert isinstance(out, ev.AllocationGranted)
    assert out.gpus == ("gpu-1",) and out.node == "node-1"
    assert c.avail("gpu-1") == (tf(50), 8 * Gi)
    node_used = sum(g.used_milli_tflops for g in c.state.gpus.values() if g.node == "node-1")
    assert node_used == tf(50)


def test_s02_multi_gpu_request_lands_on_one_node() -> None:
    c = env_cluster()
    out = c.request(a_request("p", 20, 4 * Gi, count=2))
    assert isinstance(out, ev.AllocationGranted)
    assert {c.state.gpus[g].node for g in out.gpus} == {"node-1"}
    # default strategy picks the emptiest GPUs (by available%) on the fullest node: gpu-2 has most VRAM free
    for name in out.gpus:
        cap = c.state.gpus[name].spec.capacity
        assert c.avail(name) == (cap.milli_tflops - tf(20), cap.vram_bytes - 4 * Gi)


def test_s02_compact_first_with_zero_weights_picks_by_name() -> None:
    c = env_cluster(placement="compact-first", vram_weight=0.0, tflops_weight=0.0)
    out = c.request(a_request("p", 20, 4 * Gi, count=2))
    assert isinstance(out, ev.AllocationGranted) and out.gpus == ("gpu-1", "gpu-2")


def test_s03_more_gpus_than_any_node_is_rejected_naming_same_node_filter() -> None:
    c = env_cluster()
    before = c.state.gpus["gpu-1"].used_milli_tflops
    out = c.request(a_request("p", 10, 2 * Gi, count=10))
    assert isinstance(out, ev.AllocationRejected) and out.code == "unschedulable"
    assert "SameNodeFilter removed" in out.reason
    assert c.state.gpus["gpu-1"].used_milli_tflops == before and "p" not in c.state.allocations


def test_s04_request_larger_than_any_gpu_is_rejected_by_resource_filter() -> None:
    c = env_cluster()
    out = c.request(a_request("p", 200, 64 * Gi))
    assert isinstance(out, ev.AllocationRejected) and out.code == "unschedulable"
    assert {f.name: f.removed for f in out.filters}["ResourceFilter"] == 5


def test_s05_unknown_pool_is_rejected() -> None:
    out = env_cluster().request(a_request("p", 10, 2 * Gi, pool="nonexistent-pool"))
    assert isinstance(out, ev.AllocationRejected)
    assert (out.code, out.reason, out.field) == ("unknown_pool", "no gpu devices in pool nonexistent-pool", "spec.pool")


def test_s06_model_filter() -> None:
    c = env_cluster()
    out = c.request(a_request("p", 50, 8 * Gi, gpu_models=("A100",)))
    assert isinstance(out, ev.AllocationGranted) and c.state.gpus[out.gpus[0]].spec.model == "A100"
    for model in ("NonExistentModel", "H100"):
        c2 = env_cluster()
        bad = c2.request(a_request("q", 50, 8 * Gi, gpu_models=(model,)))
        # H100 exists (gpu-4) but is Pending: it could become Running, so the request waits
        expected = ev.AllocationQueued if model == "H100" else ev.AllocationRejected
        assert isinstance(bad, expected)


def test_s07_release_restores_exactly_and_a_second_release_changes_nothing() -> None:
    c = env_cluster()
    c.request(a_request("test-pod", 30, 6 * Gi))
    assert c.avail("gpu-1") == (tf(70), 10 * Gi)
    (released,) = c.release("test-pod")
    assert isinstance(released, ev.AllocationReleased) and released.gpus == ("gpu-1",)
    assert c.avail("gpu-1") == (tf(100), 16 * Gi) and "test-pod" not in c.state.allocations
    (again,) = c.release("test-pod")
    assert isinstance(again, ev.IntentRejected) and "not live" in again.reason
    assert c.avail("gpu-1") == (tf(100), 16 * Gi)


def test_s08_release_of_multi_gpu_allocation_restores_each_gpu() -> None:
    c = env_cluster(placement="compact-first", vram_weight=0.0, tflops_weight=0.0)
    c.request(a_request("p", 20, 4 * Gi, count=2))
    assert c.avail("gpu-1") == (tf(80), 12 * Gi) and c.avail("gpu-2") == (tf(80), 28 * Gi)
    c.release("p")
    assert c.avail("gpu-1") == (tf(100), 16 * Gi) and c.avail("gpu-2") == (tf(100), 32 * Gi)


@pytest.mark.parametrize(("tflops", "count"), [(0.5, 1), (0.25, 2)])
def test_s14_sub_unit_tflops_are_exact(tflops: float, count: int) -> None:
    c = env_cluster()
    out = c.request(a_request("p", tflops, Gi, count=count))
    assert isinstance(out, ev.AllocationGranted)
    for name in out.gpus:
        assert c.avail(name)[0] == tf(100) - tf(tflops)
    usage = c.state.usage["default"]
    assert usage.requests_milli_tflops == tf(tflops) * count and usage.requests_vram_bytes == Gi * count


def test_duplicate_allocation_id_is_an_intent_rejection_and_keeps_the_first() -> None:
    c = env_cluster()
    first = c.request(a_request("p", 10, Gi))
    second = c.request(a_request("p", 90, Gi))
    assert isinstance(first, ev.AllocationGranted) and isinstance(second, ev.IntentRejected)
    assert second.field == "spec.allocation_id" and "already exists" in second.reason
    assert c.state.allocations["p"].spec.request.milli_tflops == tf(10)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"count": 0}, "spec.gpu_count"),
        ({"count": 129}, "spec.gpu_count"),
        ({"qos": "urgent"}, "spec.qos"),
        ({"isolation": "strict"}, "spec.isolation"),
        ({"partition_template": "1g.10gb"}, "spec.partition_template"),
        ({"limit": None, "tflops": -1}, "request.milli_tflops"),
    ],
)
def test_invalid_requests_are_rejected_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"tflops": 10, "vram": Gi, **kwargs}
    if args.get("limit", 1) is None:
        args.pop("limit")
    out = env_cluster().request(a_request("p", **args))  # type: ignore[arg-type]
    assert isinstance(out, ev.AllocationRejected) and out.code == "invalid" and out.field == field


def test_request_above_limit_is_invalid() -> None:
    from tests.unit.allocator.builders import res
    out = env_cluster().request(a_request("p", 50, Gi, limit=res(40, Gi)))
    assert isinstance(out, ev.AllocationRejected) and out.field == "request.milli_tflops"
