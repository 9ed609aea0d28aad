"""Workload preparation: tuning to 130 % of capacity, the seeded node order, typical pods, loading."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.allocator.domain.strategies.workload import DEFAULT_WORKLOAD, typical_workload
from services.trace import openb
from services.trace.openb import TraceError, TracePod, trace_pods
from services.trace.workload import node_order, tune
from tests.unit.trace.cluster import node, pod

PODS = [pod(f"p{i}", milli=m, count=k) for i, (m, k) in enumerate([(500, 1), (1000, 2), (0, 0), (250, 1)])]


def test_tune_resamples_up_to_the_target_and_not_past_it() -> None:
    tuned = tune(PODS, capacity_milli=10_000, seed=1)
    total = sum(p.demand for p in tuned)
    assert total <= 13_000
    assert total > 13_000 - 2000  # stopped by a draw that would have passed the target
    assert sorted(p.name for p in tuned[:4]) == ["p0", "p1", "p2", "p3"]  # the originals, shuffled
    assert all("-t" in p.name for p in tuned[4:])
    assert len({p.name for p in tuned}) == len(tuned)


def test_tune_trims_a_trace_above_the_target() -> None:
    tuned = tune(PODS * 1, capacity_milli=1000, seed=3)
    assert sum(p.demand for p in tuned) <= 1300


@pytest.mark.timeout(30)  # before the fix the resampling never ended on a CPU-only trace
def test_tune_returns_a_trace_without_gpu_demand_shuffled_and_otherwise_as_is() -> None:
    cpu_only = [pod(f"c{i}", milli=0, count=0) for i in range(5)]
    tuned = tune(cpu_only, capacity_milli=10_000, seed=42)
    assert sorted(p.name for p in tuned) == [p.name for p in cpu_only]
    assert tune([], capacity_milli=10_000, seed=42) == []


_POD = st.builds(lambda count, milli, cpu: pod("x", milli=milli, count=count, cpu=cpu),
                 st.integers(0, 8), st.integers(0, 1000), st.integers(0, 4000))


@pytest.mark.timeout(60, method="thread")  # a hang under hypothesis: the signal would be retried
@settings(max_examples=300, deadline=None)
@given(st.lists(_POD, max_size=6), st.integers(0, 40_000), st.floats(0.1, 2.0), st.integers(0, 10**6))
def test_tune_ends_and_meets_the_target_within_one_draw(pods: list[TracePod], capacity: int, ratio: float,
                                                        seed: int) -> None:
    pods = [msgspec.structs.replace(p, name=f"p{i}") for i, p in enumerate(pods)]
    tuned = tune(pods, capacity_milli=capacity, seed=seed, ratio=ratio)
    target = ratio * capacity
    before, after = sum(p.demand for p in pods), sum(p.demand for p in tuned)
    if before == 0:
        assert sorted(p.name for p in tuned) == sorted(p.name for p in pods)
    elif before < target:  # resampled: the originals, then copies until a draw's per-GPU milli passes
        assert sorted(p.name for p in tuned[: len(pods)]) == sorted(p.name for p in pods)
        assert after > target - 1000
        assert after <= target + max((p.count - 1) * p.milli for p in pods)
    else:  # trimmed to the target, never below it by more than one pod
        assert {p.name for p in tuned} <= {p.name for p in pods}
        assert after <= target
        assert after > target - max(p.demand for p in pods) or not tuned


def test_tune_is_deterministic_per_seed() -> None:
    assert tune(PODS, capacity_milli=10_000, seed=5) == tune(PODS, capacity_milli=10_000, seed=5)
    orders = {tuple(p.name for p in tune(PODS, capacity_milli=10_000, seed=s)) for s in range(6)}
    assert len(orders) > 1


def test_node_order_prefixes_a_seeded_permutation() -> None:
    nodes = [node(f"n{i}", gpus=1, cpu=1000) for i in range(5)]
    first = node_order(nodes, seed=42)
    assert sorted(n.node[:4] for n in first) == ["0000", "0001", "0002", "0003", "0004"]
    assert all(g.name.startswith(n.node[:5]) for n in first for g in n.gpus)
    assert node_order(nodes, seed=42) == first
    assert {tuple(n.node for n in node_order(nodes, seed=s)) for s in range(5)} != {tuple(n.node for n in first)}


def test_typical_workload_takes_the_popular_classes_to_95_percent() -> None:
    keys = [(1000, 500, 1, ())] * 90 + [(2000, 1000, 1, ())] * 6 + [(0, 0, 0, ())] * 4
    workload = typical_workload(keys)
    assert [(t.milli, t.count) for t in workload] == [(500, 1), (1000, 1)]  # 96 % covered
    assert sum(t.weight for t in workload) == pytest.approx(1)
    assert workload[0].weight == pytest.approx(90 / 96)
    with pytest.raises(ValueError, match="no pods"):
        typical_workload([])


def test_default_workload_is_openbs_35_classes() -> None:
    assert len(DEFAULT_WORKLOAD) == 35
    assert sum(t.weight for t in DEFAULT_WORKLOAD) == pytest.approx(1)
    assert not any(t.count > 1 for t in DEFAULT_WORKLOAD)  # multi-GPU classes fall below the cut


def test_trace_pods_maps_rows_and_keeps_cpu_only_pods() -> None:
    pods = trace_pods(openb.PODS_CSV)
    assert len(pods) == 8152
    assert sum(1 for p in pods if p.count == 0) == 1088
    assert sum(p.demand for p in pods) == 6_086_800
    share = next(p for p in pods if 0 < p.milli < 1000)
    spec = share.spec(pool="x")
    assert spec.request.compute_milli_percent == share.milli * 100
    cpu_only = next(p for p in pods if p.count == 0).spec(pool="x")
    assert cpu_only.gpu_count == 1 and cpu_only.request.compute_milli_percent == 0


def test_trace_pods_names_the_bad_field(tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,x,500\n")
    with pytest.raises(TraceError, match="line 2: num_gpu: 'x'"):
        trace_pods(bad)
    bad.write_text("name,cpu_milli\np,1\n")
    with pytest.raises(TraceError, match="missing columns"):
        trace_pods(bad)
