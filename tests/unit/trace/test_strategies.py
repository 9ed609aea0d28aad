"""The paper's strategies and frag-cpu in the domain on hand-computed clusters, and the optimised
Scheduler deciding like the ReferenceScheduler on random trace-shaped clusters (hypothesis)."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.allocator.domain import profile
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.strategies.fgd import sigmoid_score
from services.allocator.domain.strategies.fragmentation import TaskClass
from services.allocator.domain.strategies.paper import stable_hash
from services.trace.openb import TracePod
from tests.unit.trace.cluster import Sim, cluster, node, pod, request

SMALL = TaskClass(weight=0.5, milli=500, count=1, cpu_milli=2000)
WHOLE = TaskClass(weight=0.5, milli=1000, count=1, cpu_milli=20_000)


def _two_nodes(strategy: str, workload: tuple[TaskClass, ...] | None = None) -> Sim:
    sim = cluster(strategy, node("a", gpus=2, cpu=12_000), target=workload)
    assert request(sim, pod("x", milli=700, cpu=2000)) == ("a", ("a-gpu-0",))
    sim.add(node("b", gpus=2, cpu=64_000))
    return sim


def test_sigmoid_score_is_the_simulators_integer_scale() -> None:
    assert sigmoid_score(0) == 50
    assert sigmoid_score(-250) == 56  # 100 / (1 + e^-0.25) = 56.2
    assert sigmoid_score(250) == 43
    assert sigmoid_score(10**9) == 0


def test_best_fit_takes_the_node_with_least_cpu_and_gpu_leftover() -> None:
    state = _two_nodes("best-fit")
    # a: 0.5·8000/128000 + 0.5·800/8000 = 0.081; b: 0.5·62000/128000 + 0.5·1500/8000 = 0.336
    assert request(state, pod("y", milli=200, cpu=2000)) == ("a", ("a-gpu-0",))  # tightest GPU (300 free)


def test_fgd_takes_the_smallest_fragmentation_increase() -> None:
    state = _two_nodes("fgd", (SMALL, WHOLE))
    # a [300, 1000] cpu 10000 -> [300, 500] cpu 8000: F 800 -> 550, Δ = -250 (score 56);
    # b [1000, 1000] -> [500, 1000]: F 0 -> 250, Δ = +250 (score 43)
    assert request(state, pod("y", milli=500, cpu=2000)) == ("a", ("a-gpu-1",))


def test_frag_cpu_avoids_stranding_gpus_behind_cpu() -> None:
    workload = (TaskClass(weight=1.0, milli=1000, count=1, cpu_milli=10_000),)
    nodes = (node("a", gpus=4, cpu=40_000), node("b", gpus=4, cpu=100_000))
    heavy = pod("y", milli=1000, cpu=25_000)
    # FGD: both nodes still fit the class afterwards (Δ = 0, a tie): node order picks a, whose
    # 15 cores left strand two of its three free GPUs
    assert request(cluster("fgd", *nodes, target=workload), heavy) == ("a", ("a-gpu-0",))
    # frag-cpu: on a only 1 of 3 fitting pods has CPU: F 0 -> 3000·(1 − 1/3) = 2000; b stays 0
    assert request(cluster("frag-cpu", *nodes, target=workload), heavy) == ("b", ("b-gpu-0",))


def test_class_fragment_cpu_equals_fgd_when_cpu_does_not_bind() -> None:
    from services.allocator.domain.strategies.fragmentation import class_fragment, class_fragment_cpu
    task = TaskClass(weight=1.0, milli=470, count=1, cpu_milli=4000)
    for free, cpu in (([1000, 300, 0], 64_000), ([470, 469], 4000), ([200], 64_000)):
        assert class_fragment_cpu(free, cpu_free=cpu, model="", task=task) == class_fragment(
            free, cpu_free=cpu, model="", task=task)
    # sharing classes keep FGD's measure even when CPU binds
    assert class_fragment_cpu([1000, 470], cpu_free=4000, model="", task=task) == 0
    whole = TaskClass(weight=1.0, milli=1000, count=2, cpu_milli=4000)
    # 3 free GPUs hold one 2-GPU pod, CPU holds 2: FGD's value (the 300 that is too small)
    assert class_fragment_cpu([1000, 1000, 1000, 300], cpu_free=8000, model="", task=whole) == 300
    # 4 free GPUs hold two 2-GPU pods, CPU only one: half of the 4000 is stranded
    assert class_fragment_cpu([1000] * 4, cpu_free=4000, model="", task=whole) == 2000


def test_random_is_a_stable_hash_of_allocation_and_node() -> None:
    state = cluster("random", node("a", gpus=1, cpu=64_000), node("b", gpus=1, cpu=64_000))
    expected = min(("a", "b"), key=lambda n: stable_hash("y", n))
    assert request(state, pod("y", milli=1000)) == (expected, (f"{expected}-gpu-0",))


def test_cpu_only_pods_take_cpu_but_no_gpu_share() -> None:
    state = cluster("best-fit", node("a", gpus=1, cpu=8000))
    assert request(state, pod("c", milli=0, count=0, cpu=6000)) is not None
    assert state.state.gpus["a-gpu-0"].used_milli_tflops == 0
    assert request(state, pod("w", milli=1000, cpu=4000)) is None  # 2000 millicores left


NODE_SHAPES = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([8000, 16_000, 64_000, 96_000]),
                        st.sampled_from(["P100", "T4"]))
POD_SHAPES = st.tuples(st.sampled_from([0, 1, 1, 1, 2, 4]), st.sampled_from([110, 230, 470, 650, 810, 1000]),
                       st.sampled_from([0, 2000, 8000, 16_000]), st.sampled_from([(), ("T4",), ("P100", "T4")]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(NODE_SHAPES, min_size=1, max_size=6), pods=st.lists(POD_SHAPES, min_size=1, max_size=40),
       strategy=st.sampled_from(sorted(profile.STRATEGIES)))
def test_scheduler_decides_like_the_reference_on_trace_pods(nodes: list, pods: list, strategy: str) -> None:  # type: ignore[type-arg]
    registered = [node(f"n{i}", gpus=g, cpu=c, model=m) for i, (g, c, m) in enumerate(nodes)]
    trace = [TracePod(name=f"p{i}", cpu_milli=cpu or 100, memory_bytes=2**30, count=k,
                      milli=(1000 if k > 1 else milli) if k else 0, models=models)
             for i, (k, milli, cpu, models) in enumerate(pods)]
    workload = (SMALL, WHOLE, TaskClass(weight=0.2, milli=0, count=0, cpu_milli=4000))
    fast = cluster(strategy, *registered, target=workload)
    naive = cluster(strategy, *registered, scheduler=ReferenceScheduler(target=workload))
    for i, p in enumerate(trace):
        again = msgspec.structs.replace(p, name=f"{i}-{p.name}")
        assert request(fast, again) == request(naive, again), f"pod {i} {p}"
