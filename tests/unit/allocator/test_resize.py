"""ResizeAllocation with AdjustAllocation semantics: S09, S21, S22, S23, and the max_request answer."""

from __future__ import annotations

from events import decisions as ev
from events.values import QuotaAmount, QuotaSpec
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request, res, tf


def one_gpu(tflops: float, vram: int) -> Cluster:
    c = Cluster()
    c.node("node-1", "test-pool", a_gpu("gpu-1", tflops, vram))
    return c


def test_s09_scale_up_fails_with_room_then_up_and_down_move_available_by_the_delta() -> None:
    c = one_gpu(100, 16 * Gi)
    c.request(a_request("test-pod", 50, 10 * Gi))
    assert c.avail("gpu-1") == (tf(50), 6 * Gi)
    too_big = c.resize("test-pod", res(300, 30 * Gi), res(400, 40 * Gi))
    assert isinstance(too_big, ev.ResizeRejected) and too_big.code == "capacity"
    assert too_big.max_request == res(100, 16 * Gi)  # its own 50/10Gi plus the GPU's free 50/6Gi
    assert c.avail("gpu-1") == (tf(50), 6 * Gi)
    up = c.resize("test-pod", res(90, 15 * Gi), res())
    assert isinstance(up, ev.AllocationResized) and c.avail("gpu-1") == (tf(10), Gi)
    down = c.resize("test-pod", res(10, Gi), res())
    assert isinstance(down, ev.AllocationResized) and c.avail("gpu-1") == (tf(90), 15 * Gi)
    assert c.state.allocations["test-pod"].spec.request == res(10, Gi)


def test_s21_resize_of_multi_gpu_allocation_scales_quota_by_count() -> None:
    c = Cluster()
    c.node("node1", "test-pool", a_gpu("gpu1", 100, 1000), a_gpu("gpu2", 100, 1000))
    c.quota("test-ns", a_quota(req=(200, 2000), workers=10))
    c.request(a_request("p", 30, 300, count=2, ns="test-ns"))
    out = c.resize("p", res(40, 400), res(50, 500))
    assert isinstance(out, ev.AllocationResized)
    usage = c.state.usage["test-ns"]
    assert (usage.requests_milli_tflops, usage.requests_vram_bytes) == (tf(80), 800)
    assert (usage.limits_milli_tflops, usage.limits_vram_bytes) == (tf(100), 1000)
    assert c.avail("gpu1") == (tf(60), 600) and c.avail("gpu2") == (tf(60), 600)
    c.resize("p", res(30, 300), res(30, 300))
    assert c.state.usage["test-ns"].requests_milli_tflops == tf(60) and c.avail("gpu1") == (tf(70), 700)


def test_s22_limit_only_growth_over_total_quota_is_rejected() -> None:
    c = one_gpu(500, 5000)
    c.quota("test-ns", a_quota(req=(200, 2000), workers=10))
    c.request(a_request("p", 30, 300, ns="test-ns"))
    out = c.resize("p", res(30, 300), res(250, 2500))
    assert isinstance(out, ev.ResizeRejected) and out.code == "quota"
    assert out.quota_dimension == "total.max.tflops.limit"
    assert c.state.usage["test-ns"].limits_milli_tflops == tf(30) and c.avail("gpu-1") == (tf(470), 4700)


def test_s23_resize_checks_absolute_single_caps() -> None:
    c = one_gpu(500, 5000)
    c.quota("test-ns", QuotaSpec(total_requests=QuotaAmount(milli_tflops=tf(500), vram_bytes=5000),
                                 max_limits=QuotaAmount(milli_tflops=tf(100), vram_bytes=1000)))
    c.request(a_request("p", 50, 500, ns="test-ns"))
    out = c.resize("p", res(50, 500), res(150, 500))
    assert isinstance(out, ev.ResizeRejected) and out.quota_dimension == "single.max.tflops.limit"


def test_resize_over_quota_says_the_largest_request_that_fits_quota() -> None:
    c = Cluster()
    c.node("n", "test-pool", a_gpu("g1", 100, 100), a_gpu("g2", 100, 100))
    c.quota("ns", a_quota(req=(100, 1000)))
    c.request(a_request("other", 20, 10, ns="ns"))
    c.request(a_request("p", 10, 10, count=2, ns="ns"))
    out = c.resize("p", res(60, 10), res(60, 10))
    assert isinstance(out, ev.ResizeRejected) and out.code == "quota"
    assert out.max_request.milli_tflops == tf(40)  # (100 − 20 other) / 2 GPUs
    assert isinstance(c.resize("p", out.max_request, out.max_request), ev.AllocationResized)


def test_resize_of_unknown_or_queued_allocation_is_rejected() -> None:
    c = one_gpu(10, Gi)
    c.request(a_request("big", 10, Gi))
    queued = c.request(a_request("q", 5, Gi))
    assert isinstance(queued, ev.AllocationQueued)
    for uid in ("q", "missing"):
        out = c.resize(uid, res(1, 1), res(1, 1))
        assert isinstance(out, ev.ResizeRejected) and out.code == "not_granted"


def test_resize_down_grants_a_queued_request() -> None:
    c = one_gpu(100, 10 * Gi)
    c.request(a_request("a", 80, 5 * Gi))
    assert isinstance(c.request(a_request("b", 50, 5 * Gi)), ev.AllocationQueued)
    out = c.send(__import__("events.intents", fromlist=["x"]).ResizeAllocation(
        intent_id="r", allocation_id="a", request=res(50, 5 * Gi), limit=res(50, 5 * Gi)))
    assert [type(e).__name__ for e in out] == ["AllocationResized", "AllocationGranted"]
