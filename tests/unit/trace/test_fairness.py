"""``trace fairness``: the metrics on known inputs, the tenants' arrivals, and the simulation on a
two-GPU cluster where every figure is worked out by hand."""

from __future__ import annotations

import math

import pytest

from services.trace import fairness
from services.trace.fairness import Settings, simulate
from services.trace.share_metric import Timeline, jain_index, percentile, weighted_dominant_shares
from services.trace.tenants import TENANTS, Arrival, Bursts, Tenant, arrivals, check_tenants
from tests.unit.trace.cluster import TFLOPS, node, pod


def test_jain_index_of_known_vectors() -> None:
    assert jain_index([1, 1, 1, 1]) == 1.0
    assert jain_index([1, 0, 0, 0]) == 0.25  # one holds everything: 1/n
    assert jain_index([1, 2]) == pytest.approx(0.9)  # 9 / (2 * 5)
    assert jain_index([3, 1, 1, 1]) == pytest.approx(36 / (4 * 12))
    assert jain_index([0, 0]) == 1.0
    with pytest.raises(ValueError, match="undefined"):
        jain_index([])
    with pytest.raises(ValueError, match="negative"):
        jain_index([1, -1])


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="q"):
        percentile(values, 0)


def test_timeline_integrates_a_hand_built_run_inside_the_window() -> None:
    line = Timeline(start=10, end=110, capacity_milli=1000, shares=["a", "b"])
    line.record(0, used_milli=500, below=frozenset({"a"}), jain=None)  # warm-up: counts from 10 on
    line.record(20, used_milli=1000, below=frozenset({"a", "b"}), jain=0.5)
    line.record(60, used_milli=0, below=frozenset(), jain=1.0)
    line.record(200, used_milli=1000, below=frozenset({"b"}), jain=0.0)  # after the window: nothing
    got = line.finish()
    assert got.seconds == 100
    assert got.utilisation_pct == pytest.approx(100 * (500 * 10 + 1000 * 40) / (1000 * 100))
    assert got.below_guarantee_s == {"a": 50, "b": 40}
    assert got.jain_seconds == 90
    assert got.jain == pytest.approx((0.5 * 40 + 1.0 * 50) / 90)
    with pytest.raises(ValueError, match="end"):
        Timeline(start=5, end=5, capacity_milli=1, shares=[])


def test_timeline_refuses_time_going_back() -> None:
    line = Timeline(start=0, end=100, capacity_milli=1000, shares=["a"])
    line.record(50, used_milli=1, below=frozenset(), jain=None)
    with pytest.raises(ValueError, match="before"):
        line.record(40, used_milli=1, below=frozenset(), jain=None)


def test_weighted_dominant_shares_divide_by_the_normalised_weight() -> None:
    usage = {"a": (50.0, 0.0, 1.0), "b": (10.0, 0.0, 3.0)}
    got = weighted_dominant_shares(usage, (100.0, 0.0, 4.0), {"a": 3, "b": 1})
    assert got["a"] == pytest.approx(0.5 / 0.75)  # TFLOPS dominates; VRAM of capacity 0 skipped
    assert got["b"] == pytest.approx(0.75 / 0.25)  # GPUs dominate


PODS = [pod(f"p{i}", milli=m, count=k) for i, (m, k) in enumerate([(500, 1), (1000, 2), (0, 0), (250, 1)])]


def test_arrivals_are_seeded_sorted_and_inside_the_horizon() -> None:
    one = arrivals(TENANTS, PODS, capacity_milli=8000, horizon_s=20_000, seed=1)
    assert one == arrivals(TENANTS, PODS, capacity_milli=8000, horizon_s=20_000, seed=1)
    assert one != arrivals(TENANTS, PODS, capacity_milli=8000, horizon_s=20_000, seed=2)
    assert [a.at for a in one] == sorted(a.at for a in one)
    assert all(0 <= a.at < 20_000 for a in one)
    assert {a.tenant for a in one} <= {t.share for t in TENANTS}
    assert all(a.pod.count for a in one)  # CPU-only pods are never drawn


def test_arrivals_offer_burst_times_the_guarantee_while_on() -> None:
    """Always ON (off periods ~0): offered milli-GPU·s ≈ burst × guarantee × capacity × horizon."""
    bursts = Bursts(on_mean_s=1e9, off_mean_s=1e-9, burst=2.0, min_duration_s=100, max_duration_s=100)
    tenants = [Tenant(share="x", namespace="x", guarantee_pct=50, weight=1)]
    got = arrivals(tenants, PODS, capacity_milli=10_000, horizon_s=200_000, seed=3, bursts=bursts)
    offered = sum(a.pod.demand * a.duration_s for a in got)
    assert offered == pytest.approx(2.0 * 0.5 * 10_000 * 200_000, rel=0.1)


def test_tenants_are_checked() -> None:
    with pytest.raises(ValueError, match=r"tenants.guarantee_pct: the guarantees sum to 110"):
        check_tenants([Tenant(share="a", namespace="a", guarantee_pct=60, weight=1),
                       Tenant(share="b", namespace="b", guarantee_pct=50, weight=1)])
    with pytest.raises(ValueError, match=r"tenants.share: repeated"):
        check_tenants([Tenant(share="a", namespace="a", guarantee_pct=10, weight=1),
                       Tenant(share="a", namespace="b", guarantee_pct=10, weight=1)])
    with pytest.raises(ValueError, match=r"tenants.weight"):
        check_tenants([Tenant(share="a", namespace="a", guarantee_pct=10, weight=0)])
    with pytest.raises(ValueError, match="no GPU pod"):
        arrivals(TENANTS, [pod("cpu", milli=0, count=0)], capacity_milli=1000, horizon_s=10, seed=1)


HALVES = (Tenant(share="a", namespace="team-a", guarantee_pct=50, weight=1),
          Tenant(share="b", namespace="team-b", guarantee_pct=50, weight=1))
WHOLE = pod("whole", milli=1000)


def _scenario() -> list[Arrival]:
    """Two GPUs; share a asks for both at 0 (100 s each), share b for one at 10 s (100 s)."""
    return [Arrival(at=0.0, tenant="a", pod=WHOLE, duration_s=100), Arrival(at=0.0, tenant="a", pod=WHOLE,
                                                                            duration_s=100),
            Arrival(at=10.0, tenant="b", pod=WHOLE, duration_s=100)]


def _run(policy: fairness.Policy) -> fairness.PolicyRun:
    settings = Settings(horizon_s=300.0, warmup_s=0.0)
    return simulate([node("n", gpus=2, cpu=8000)], _scenario(), policy=policy, tenants=HALVES, settings=settings)


def test_no_quotas_leaves_b_below_its_guarantee_until_a_pod_of_a_ends() -> None:
    got = _run("no-quotas")
    below = {s.share: s.below_guarantee_s for s in got.shares}
    assert below == {"a": 0.0, "b": 90.0}  # b's covered request waits 10 s -> 100 s
    assert got.restored == 1
    assert got.restore_batches == {"p50": 1, "p99": 1, "max": 1}  # granted by the next batch (a's release)
    assert got.restore_late == 0  # one batch is not late
    assert got.restore_s["p50"] == 90.0
    assert got.preemptions == 0
    # GPU-seconds: 2 GPUs 0-100, 1 GPU 100-200 (b), 0 after, over 300 s of 2 GPUs
    assert got.utilisation_pct == pytest.approx(100 * (2 * 100 + 1 * 100) / (2 * 300))
    assert got.batches == 6  # 3 arrivals, 3 releases
    assert got.jain_time_pct == 0.0  # never two shares waiting at once


def test_hard_quotas_hold_a_at_its_guarantee_and_b_is_never_below() -> None:
    got = _run("hard-quotas")
    assert {s.share: s.below_guarantee_s for s in got.shares} == {"a": 0.0, "b": 0.0}
    assert got.restored == 0  # b granted from free capacity in its own arrival batch: nothing to restore
    usage = {s.share: s.mean_usage_pct for s in got.shares}
    # a: one GPU 0-100, its second (quota-blocked) 100-200; b: 10-110; of 2 GPUs x 300 s
    assert usage["a"] == pytest.approx(100 * 200 / 600, abs=1e-3)
    assert usage["b"] == pytest.approx(100 * 100 / 600, abs=1e-3)


def test_a_run_is_deterministic_per_seed() -> None:
    nodes = [node("n", gpus=2, cpu=8000), node("m", gpus=4, cpu=16000)]
    pods = [pod("half", milli=500), pod("whole", milli=1000), pod("pair", milli=1000, count=2)]
    settings = Settings(horizon_s=4 * 3600.0, warmup_s=600.0,
                        bursts=Bursts(on_mean_s=1800, off_mean_s=1800, max_duration_s=1800))
    one, two = (fairness.run_policy(nodes, pods, policy="no-quotas", seed=7, tenants=HALVES, settings=settings)
                for _ in range(2))
    one.wall_s = two.wall_s = 0.0
    assert one == two
    other = fairness.run_policy(nodes, pods, policy="no-quotas", seed=8, tenants=HALVES, settings=settings)
    other.wall_s = 0.0
    assert other != one
    assert one.arrivals > 20


def test_unknown_policy_and_bad_window_are_refused() -> None:
    with pytest.raises(KeyError, match="unknown policy"):
        fairness.check_policy("lottery")
    with pytest.raises(ValueError, match="warmup_s"):
        simulate([node("n", gpus=1, cpu=1000)], [], policy="no-quotas", tenants=HALVES,
                 settings=Settings(horizon_s=10.0, warmup_s=10.0))
    with pytest.raises(ValueError, match="scale"):
        fairness.sample_nodes([node("n", gpus=1, cpu=1000)], 0.0)


def test_tflops_of_the_test_gpu() -> None:
    assert TFLOPS == 18_700  # the guarantees above are in whole GPUs of this size


def test_borrow_lends_a_the_idle_gpu_and_b_waits_for_it() -> None:
    got = _run("borrow")
    assert {s.share: s.below_guarantee_s for s in got.shares} == {"a": 0.0, "b": 90.0}
    assert got.preemptions == 0
    assert got.restore_batches["max"] == 1


@pytest.mark.parametrize("policy", ["reclaim", "fair-share", "reclaim-all"])
def test_reclaim_gives_b_its_gpu_back_in_its_own_batch(policy: fairness.Policy) -> None:
    got = _run(policy)
    assert {s.share: s.below_guarantee_s for s in got.shares} == {"a": 0.0, "b": 0.0}
    assert got.preemptions == got.reclaims == 1  # a's borrowed GPU, once
    assert got.rejected == 0  # the resubmission is a valid pod
    assert {s.share: s.preempted for s in got.shares} == {"a": 1, "b": 0}
    assert got.restored == 1
    assert got.restore_batches == {"p50": 0, "p99": 0, "max": 0}
    assert got.restore_s["max"] == 0.0
    # a's preempted pod is resubmitted at 10 s and runs 100-200 s after a's first pod ends
    assert got.utilisation_pct == pytest.approx(100 * (2 * 110 + 1 * 90) / (2 * 300), abs=1e-3)


@pytest.mark.parametrize(("policy", "preemptions"), [("reclaim", 1), ("reclaim-all", 2)])
def test_reclaim_takes_what_is_needed_and_reclaim_all_takes_every_borrowed_pod(policy: fairness.Policy,
                                                                                 preemptions: int) -> None:
    """Four GPUs; a holds all four (two borrowed) when b asks for one: reclaim preempts one of a's
    borrowed pods, reclaim-all both; b is restored in its own batch either way."""
    drawn = [Arrival(at=0.0, tenant="a", pod=WHOLE, duration_s=100) for _ in range(4)]
    drawn.append(Arrival(at=10.0, tenant="b", pod=WHOLE, duration_s=100))
    got = simulate([node("n", gpus=4, cpu=16000)], drawn, policy=policy, tenants=HALVES,
                   settings=Settings(horizon_s=300.0, warmup_s=0.0))
    assert got.preemptions == got.reclaims == preemptions
    assert got.restore_batches["max"] == 0
    assert {s.share: s.below_guarantee_s for s in got.shares} == {"a": 0.0, "b": 0.0}


def test_a_request_restored_two_batches_after_it_was_covered_is_late() -> None:
    """As in the no-quotas story, plus one more pod of a at 50 s (a batch that frees nothing):
    b's request, covered at its arrival (batch 3), is granted by a's release at 100 s (batch 5)."""
    drawn = [*_scenario(), Arrival(at=50.0, tenant="a", pod=WHOLE, duration_s=10)]
    got = simulate([node("n", gpus=2, cpu=8000)], drawn, policy="no-quotas", tenants=HALVES,
                   settings=Settings(horizon_s=300.0, warmup_s=0.0))
    assert got.restore_batches["max"] == 2
    assert got.restore_late == 1
    assert got.restore_s["max"] == 90.0
