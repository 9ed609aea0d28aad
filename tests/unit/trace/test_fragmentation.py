"""The fragmentation measure and the unallocated-% metric on hand-computed small cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.allocator.domain.strategies.fragmentation import FragmentCache, TaskClass, class_fragment, node_fragment
from services.allocator.domain.strategies.workload import DEFAULT_WORKLOAD
from services.trace.metric import cluster_fragmentation, unallocated_curve
from tests.unit.trace.cluster import cluster, node, pod, request

SMALL = TaskClass(weight=0.5, milli=500, count=1, cpu_milli=2000)
WHOLE = TaskClass(weight=0.5, milli=1000, count=1, cpu_milli=20_000)
CPU_ONLY = TaskClass(weight=1.0, milli=0, count=0, cpu_milli=1000)
T4_ONLY = TaskClass(weight=1.0, milli=100, count=1, models=("T4",))


def test_class_fragment_counts_only_gpus_too_small_when_the_class_fits() -> None:
    # free [1000, 300]: a 500-milli class fits on GPU 0, so only GPU 1's 300 is fragment
    assert class_fragment([1000, 300], cpu_free=10_000, model="P100", task=SMALL) == 300


def test_class_fragment_is_all_idle_gpu_when_cpu_or_gpus_are_short() -> None:
    assert class_fragment([1000, 300], cpu_free=10_000, model="P100", task=WHOLE) == 1300  # CPU short
    assert class_fragment([400, 300], cpu_free=50_000, model="P100", task=SMALL) == 700  # no GPU ≥ 500
    two = TaskClass(weight=1.0, milli=1000, count=2)
    assert class_fragment([1000, 300], cpu_free=50_000, model="P100", task=two) == 1300  # one whole GPU only


def test_cpu_only_and_wrong_model_classes_count_all_idle_gpu() -> None:
    assert class_fragment([1000, 300], cpu_free=50_000, model="P100", task=CPU_ONLY) == 1300
    assert class_fragment([1000, 300], cpu_free=50_000, model="P100", task=T4_ONLY) == 1300
    assert class_fragment([1000, 300], cpu_free=50_000, model="T4", task=T4_ONLY) == 0


def test_node_fragment_is_the_weighted_sum() -> None:
    # 0.5 × 300 (SMALL fits) + 0.5 × 1300 (WHOLE lacks CPU) = 800
    assert node_fragment([1000, 300], cpu_free=10_000, model="P100", workload=(SMALL, WHOLE)) == 800
    assert node_fragment([1000, 1000], cpu_free=64_000, model="P100", workload=(SMALL, WHOLE)) == 0


def test_cache_is_keyed_by_sorted_free_and_cpu_bucket() -> None:
    cache = FragmentCache((SMALL, WHOLE))
    first = cache.get([300, 1000], cpu_free=10_000, model="P100")
    assert first == 800
    assert cache.get([1000, 300], cpu_free=19_999, model="P100") == first  # same bucket: 2000 ≤ cpu < 20000
    assert cache.get([1000, 300], cpu_free=20_000, model="P100") == 300  # both fit: 0.5·300 + 0.5·300


def test_unallocated_curve_averages_records_per_arrived_percent() -> None:
    # capacity 1000 milli: records at 50 % arrived (two of them) and 100 %
    arrived = [500, 500, 1000]
    used = [500, 400, 800]
    curve = unallocated_curve(arrived, used, capacity_milli=1000, points=(50, 51, 100, 75))
    assert curve[50] == pytest.approx(100 - 45)  # mean of 50 % and 40 % allocated
    assert curve[51] == pytest.approx(100 - 45)  # no record at 51: the x ± 1 window
    assert curve[100] == pytest.approx(20)
    assert 75 not in curve


def test_unallocated_curve_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="arrived has 2 records"):
        unallocated_curve([1, 2], [1], capacity_milli=10)
    with pytest.raises(ValueError, match="capacity_milli"):
        unallocated_curve([], [], capacity_milli=0)


def test_cluster_fragmentation_of_a_two_node_cluster() -> None:
    sim = cluster("best-fit", node("a", gpus=2, cpu=12_000))
    assert request(sim, pod("x", milli=700, cpu=2000)) == ("a", ("a-gpu-0",))
    sim.add(node("b", gpus=2, cpu=64_000))
    frag = cluster_fragmentation(sim.state, (SMALL, WHOLE))
    # a: free [300, 1000], cpu 10000 -> 800 (as above); b: empty and roomy -> 0
    assert frag.frag_milli == pytest.approx(800)
    assert frag.idle_milli == 3300
    assert frag.capacity_milli == 4000
    assert frag.frag_pct_of_capacity == pytest.approx(20)
    assert frag.frag_pct_of_idle == pytest.approx(100 * 800 / 3300)


@settings(max_examples=200, deadline=None)
@given(frees=st.lists(st.lists(st.sampled_from([0, 100, 300, 500, 1000]), min_size=1, max_size=8), min_size=1,
                      max_size=6),
       cpus=st.lists(st.integers(0, 100_000), min_size=1, max_size=6), cpu_aware=st.booleans(), openb=st.booleans())
def test_the_fragment_cache_equals_the_measure(frees: list[list[int]], cpus: list[int], cpu_aware: bool,
                                               openb: bool) -> None:
    workload = DEFAULT_WORKLOAD if openb else (
        TaskClass(weight=0.3, milli=1000, count=1, cpu_milli=2000),
        TaskClass(weight=0.3, milli=1000, count=2, cpu_milli=3000),
        TaskClass(weight=0.2, milli=500, count=1, cpu_milli=16_000),
        TaskClass(weight=0.2, milli=0, count=0, cpu_milli=4000))
    cache = FragmentCache(workload, cpu_aware=cpu_aware)
    states = [(free, cpu) for free in frees for cpu in cpus]
    for free, cpu in states + states:  # nodes in equal buckets share an entry; the second round is cached
        exact = node_fragment(free, cpu_free=cpu, model="", workload=workload, cpu_aware=cpu_aware)
        assert cache.get(free, cpu_free=cpu, model="") == exact  # bit for bit: the same sum in the same order
