"""Namespace quotas as ``internal/quota/quota_store.go``: S15-S20, S27, S29, S31, S32, S57, S58 (holes closed)."""

from __future__ import annotations

import pytest

from events import decisions as ev
from events.values import QuotaAmount, QuotaSpec
from services.allocator.domain.model import QuotaUsage
from services.allocator.domain.quota import check_single, check_totals
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request, res, tf


def two_gpu_cluster(tflops: float, vram: int, quota: QuotaSpec, ns: str = "test-ns") -> Cluster:
    c = Cluster()
    c.node("node1", "test-pool", a_gpu("gpu1", tflops, vram), a_gpu("gpu2", tflops, vram))
    c.quota(ns, quota)
    return c


def test_s15_s19_grant_within_quota_counts_request_times_count_and_one_worker() -> None:
    c = two_gpu_cluster(50, 500, a_quota(req=(100, 1000), workers=10))
    out = c.request(a_request("test-pod", 30, 300, count=2, ns="test-ns"))
    assert isinstance(out, ev.AllocationGranted) and sorted(out.gpus) == ["gpu1", "gpu2"]
    assert c.avail("gpu1") == (tf(20), 200) and c.avail("gpu2") == (tf(20), 200)
    assert c.state.usage["test-ns"] == QuotaUsage(requests_milli_tflops=tf(60), requests_vram_bytes=600,
                                                  limits_milli_tflops=tf(60), limits_vram_bytes=600, workers=1)


def test_s16_s20_over_total_quota_is_queued_with_the_dimension_and_nothing_changes() -> None:
    c = two_gpu_cluster(100, 1000, a_quota(req=(100, 1000), workers=10))
    out = c.request(a_request("p", 60, 600, count=2, ns="test-ns"))
    assert isinstance(out, ev.AllocationQueued) and out.code == "quota"
    assert out.quota_dimension == "total.max.tflops.request"
    assert out.reason == ("quota exceeded in namespace test-ns for total.max.tflops.request: 0 TFLOPS in use + "
                          "120 TFLOPS requested = 120 TFLOPS, above the limit of 100 TFLOPS (120 % of it)")
    assert c.avail("gpu1") == (tf(100), 1000) and "test-ns" not in c.state.usage


def test_s17_s29_release_returns_quota_usage_to_zero() -> None:
    c = two_gpu_cluster(50, 500, a_quota(req=(100, 1000), workers=10))
    c.request(a_request("p", 30, 300, count=2, ns="test-ns"))
    c.release("p")
    assert "test-ns" not in c.state.usage and c.avail("gpu1") == (tf(50), 500)


def test_s18_exact_boundary_is_allowed_and_zero_quota_blocks() -> None:
    c = Cluster()
    c.node("n", "test-pool", *[a_gpu(f"g{i}", 100, 1000) for i in range(10)])
    c.quota("ns", a_quota(req=(100, 1000), workers=10))
    assert isinstance(c.request(a_request("p", 10, 100, count=10, ns="ns")), ev.AllocationGranted)
    c.quota("zero", a_quota(req=(0, 0), workers=0))
    out = c.request(a_request("q", 1, 1, ns="zero"))
    assert isinstance(out, ev.AllocationQueued) and out.quota_dimension == "total.max.tflops.request"


def test_s27_sixth_worker_of_five_is_blocked_by_tflops_first() -> None:
    c = Cluster()
    c.node("node1", "test-pool", *[a_gpu(f"gpu{i}", 20, 200) for i in range(1, 5)])
    c.quota("ns", a_quota(req=(50, 500), workers=5))
    outcomes = [c.request(a_request(f"test-uid-{i}", 10, 100, ns="ns")) for i in range(6)]
    assert [type(o).__name__ for o in outcomes].count("AllocationGranted") == 5
    assert isinstance(outcomes[5], ev.AllocationQueued) and outcomes[5].quota_dimension == "total.max.tflops.request"
    assert c.state.usage["ns"].workers == 5
    free = sum(c.avail(f"gpu{i}")[0] for i in range(1, 5))
    assert free == tf(30)


@pytest.mark.parametrize(
    ("caps", "count", "dimension"),
    [
        ({"max_limits": QuotaAmount(milli_tflops=tf(50), vram_bytes=10000)}, 1, "single.max.tflops.limit"),
        ({"max_limits": QuotaAmount(milli_tflops=tf(1000), vram_bytes=500)}, 1, "single.max.vram.limit"),
        ({"max_gpu_count": 2}, 3, "single.max.gpuCount.limit"),
        ({"max_requests": QuotaAmount(milli_tflops=tf(50))}, 1, "single.max.tflops.request"),
        ({"max_limits": QuotaAmount(milli_tflops=tf(1000), vram_bytes=10000), "max_gpu_count": 4}, 2, None),
    ],
)
def test_s31_single_caps_are_per_gpu_and_final(caps: dict[str, object], count: int, dimension: str | None) -> None:
    spec = QuotaSpec(**caps)  # type: ignore[arg-type]
    block = check_single(spec, "ns", request=res(100, 1000), limit=res(100, 1000), count=count)
    assert (block.dimension if block else None) == dimension
    if block:
        assert not block.resolvable


def test_single_cap_breach_rejects_the_request_outright() -> None:
    c = two_gpu_cluster(500, 5000, QuotaSpec(max_limits=QuotaAmount(milli_tflops=tf(100))))
    out = c.request(a_request("p", 150, 100, ns="test-ns"))
    assert isinstance(out, ev.AllocationRejected) and out.quota_dimension == "single.max.tflops.limit"


@pytest.mark.parametrize(
    ("quota", "usage", "add", "dimension"),
    [
        (a_quota(req=(100, 10000)), (80, 0, 0), (30, 0), "total.max.tflops.request"),
        (a_quota(req=(1000, 1000)), (0, 800, 0), (0, 300), "total.max.vram.request"),
        (QuotaSpec(max_workers=5), (0, 0, 5), (1, 1), "total.max.workers.limit"),
        (a_quota(req=(100, 10000)), (50, 0, 0), (60, 0), "total.max.tflops.request"),
        (a_quota(req=(100, 10000)), (50, 0, 0), (50, 0), None),
    ],
)
def test_s32_total_checks(quota: QuotaSpec, usage: tuple[float, int, int], add: tuple[float, int],
                          dimension: str | None) -> None:
    used = QuotaUsage(requests_milli_tflops=tf(usage[0]), requests_vram_bytes=usage[1],
                      limits_milli_tflops=tf(usage[0]), limits_vram_bytes=usage[1], workers=usage[2])
    extra = QuotaUsage(requests_milli_tflops=tf(add[0]), requests_vram_bytes=add[1],
                       limits_milli_tflops=tf(add[0]), limits_vram_bytes=add[1], workers=1)
    block = check_totals(quota, "ns", usage=used, add=extra)
    assert (block.dimension if block else None) == dimension


def test_s57_quota_is_exact_not_rounded_up_per_operand() -> None:
    """TensorFusion rounds 250m up to 1 before ×2 and rejects 0.5 TFLOPS against a 1 TFLOPS quota."""
    c = two_gpu_cluster(100, 100 * Gi, a_quota(req=(1, 10 * Gi)))
    out = c.request(a_request("p", 0.25, Gi, count=2, ns="test-ns"))
    assert isinstance(out, ev.AllocationGranted)
    assert c.state.usage["test-ns"].requests_milli_tflops == 500


def test_s58_percent_requests_count_against_the_tflops_quota() -> None:
    """TensorFusion lets percentage requests bypass the TFLOPS quota (tflops 0); gpuledger converts them."""
    c = two_gpu_cluster(100, 100 * Gi, a_quota(req=(10, 100 * Gi)))
    out = c.request(a_request("p", 0, Gi, percent=90, ns="test-ns"))
    assert isinstance(out, ev.AllocationQueued) and out.quota_dimension == "total.max.tflops.request"
    ok = c.request(a_request("q", 0, Gi, percent=9, ns="test-ns"))
    assert isinstance(ok, ev.AllocationGranted)
    assert c.state.usage["test-ns"].requests_milli_tflops == tf(9)


def test_omitted_dimension_is_unbounded_not_zero() -> None:
    c = two_gpu_cluster(100, 100 * Gi, QuotaSpec(total_requests=QuotaAmount(milli_tflops=tf(50))))
    assert isinstance(c.request(a_request("p", 10, 50 * Gi, ns="test-ns")), ev.AllocationGranted)


def test_quota_raised_grants_the_queued_request() -> None:
    c = two_gpu_cluster(100, 1000, a_quota(req=(50, 1000)))
    queued = c.request(a_request("p", 60, 100, ns="test-ns"))
    assert isinstance(queued, ev.AllocationQueued)
    out = c.quota("test-ns", a_quota(req=(60, 1000)))
    assert isinstance(out[0], ev.QuotaSet)
    assert isinstance(out[1], ev.AllocationGranted) and out[1].from_queue
    assert c.state.allocations["p"].status == "granted"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (QuotaSpec(total_requests=QuotaAmount(milli_tflops=-10)), "spec.total_requests.milli_tflops"),
        (a_quota(req=(100, 10), lim=(50, 10)), "spec.total_limits.milli_tflops"),
        (QuotaSpec(alert_threshold_percent=150), "spec.alert_threshold_percent"),
        (QuotaSpec(max_workers=-1), "spec.max_workers"),
    ],
)
def test_s35_invalid_quota_is_rejected_naming_the_field(spec: QuotaSpec, field: str) -> None:
    (out,) = Cluster().quota("ns", spec)
    assert isinstance(out, ev.IntentRejected) and out.field == field


def test_a_quota_block_names_usage_request_and_limit_and_carries_no_note_about_nodes() -> None:
    """Issue 28 item 10: the 10 TFLOPS in use are named, in TFLOPS, and the preemption note (which
    is about nodes) is left out when the namespace quota, not the nodes, is the block."""
    c = Cluster()
    c.node("n1", "p", a_gpu("g1", 100, 80 * Gi))
    c.quota("ns", a_quota(req=(15, 1000 * Gi)))
    c.request(a_request("mine", 10, Gi, pool="p", ns="ns", qos="critical"))
    c.request(a_request("other", 50, Gi, pool="p", ns="default", qos="low"))
    out = c.request(a_request("hi", 10.5, Gi, pool="p", ns="ns", qos="critical"))
    assert isinstance(out, ev.AllocationQueued) and out.code == "quota"
    assert out.reason == ("quota exceeded in namespace ns for total.max.tflops.request: 10 TFLOPS in use + "
                          "10.5 TFLOPS requested = 20.5 TFLOPS, above the limit of 15 TFLOPS (136.7 % of it)")


def test_single_caps_and_vram_totals_are_in_tflops_and_gib() -> None:
    cap = QuotaSpec(max_requests=QuotaAmount(milli_tflops=tf(20), vram_bytes=None))
    single = check_single(cap, "ns", request=res(494.5, Gi), limit=res(494.5, Gi), count=1)
    assert single is not None and "requested 494.5 TFLOPS per GPU, above the cap of 20 TFLOPS" in single.reason
    total = QuotaSpec(total_requests=QuotaAmount(milli_tflops=None, vram_bytes=8 * Gi))
    usage = QuotaUsage(requests_vram_bytes=6 * Gi, workers=1)
    block = check_totals(total, "ns", usage=usage, add=QuotaUsage(requests_vram_bytes=3 * Gi // 2, workers=1))
    assert block is None
    block = check_totals(total, "ns", usage=usage, add=QuotaUsage(requests_vram_bytes=5 * Gi // 2, workers=1))
    assert block is not None and block.reason.endswith(
        "6 GiB in use + 2.5 GiB requested = 8.5 GiB, above the limit of 8 GiB (106.3 % of it)")
