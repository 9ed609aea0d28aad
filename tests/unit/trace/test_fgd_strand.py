"""fgd-strand (strategies/fgd_strand.py): the stranded-GPU measure by hand, the lexicographic choice
through ``process`` for GPU and CPU-only requests, and FGD's score never given up and FGD's node
kept unless the tie-break prefers another (hypothesis). That the optimised Scheduler decides
fgd-strand like the ReferenceScheduler is checked with every registered strategy in
test_strategies.py and allocator/test_scheduler.py."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.allocator.domain import profile
from services.allocator.domain.framework import Context
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.strategies.fgd import sigmoid_score
from services.allocator.domain.strategies.fgd_strand import (
    WEIGHT_SCALE,
    FgdStrand,
    StrandCache,
    cpu_classes,
    cpu_fragment,
    integer_weights,
    stranded,
)
from services.allocator.domain.strategies.fragmentation import TaskClass
from services.trace.openb import TracePod
from tests.unit.trace.cluster import POOL, cluster, node, pod, request

WHOLE = TaskClass(weight=1.0, milli=1000, count=1, cpu_milli=10_000)
MIXED = (TaskClass(weight=0.4, milli=500, count=1, cpu_milli=4000),
         TaskClass(weight=0.3, milli=1000, count=2, cpu_milli=16_000),
         TaskClass(weight=0.2, milli=0, count=0, cpu_milli=8000),
         TaskClass(weight=0.1, milli=1000, count=1, cpu_milli=12_000, models=("T4",)))


def test_stranded_counts_gpu_the_class_could_fill_but_cpu_cannot_serve() -> None:
    w = integer_weights((WHOLE,))
    # 4 free GPUs hold 4 pods, 25 cores hold 2: two GPUs (2000 milli) stranded
    assert stranded([1000] * 4, cpu_free=25_000, model="P100", workload=(WHOLE,), weights=w) == 2000 * WEIGHT_SCALE
    # CPU for every pod the GPUs hold: nothing stranded
    assert stranded([1000] * 4, cpu_free=40_000, model="P100", workload=(WHOLE,), weights=w) == 0
    # no CPU at all: every GPU the class could fill is stranded, partly used GPUs are not counted
    assert stranded([1000, 600], cpu_free=0, model="P100", workload=(WHOLE,), weights=w) == 1000 * WEIGHT_SCALE


def test_stranded_per_class_rules() -> None:
    w = integer_weights(MIXED)
    free, cpu = [1000, 1000, 1000, 600], 8000
    # share 500: GPUs hold 2+2+2+1 = 7 pods, CPU 2: 5 × 500 = 2500 at weight 0.4;
    # 2 × 1000: GPUs hold 1 pod, CPU 0: 2000 at 0.3; CPU-only: never; T4-only class on P100: never
    want = round(0.4 * WEIGHT_SCALE) * 2500 + round(0.3 * WEIGHT_SCALE) * 2000
    assert stranded(free, cpu_free=cpu, model="P100", workload=MIXED, weights=w) == want
    # on a T4 node the pinned class counts too: 3 pods by GPU, 0 by CPU
    t4 = stranded(free, cpu_free=cpu, model="T4", workload=MIXED, weights=w)
    assert t4 == want + round(0.1 * WEIGHT_SCALE) * 3000
    assert stranded(list(reversed(free)), cpu_free=cpu, model="P100", workload=MIXED, weights=w) == want


TASKS = st.builds(TaskClass, weight=st.floats(0.0, 1.0), milli=st.sampled_from([0, 1, 50, 250, 333, 500, 1000]),
                  count=st.sampled_from([0, 1, 1, 2, 4, 8]), cpu_milli=st.sampled_from([0, 1000, 4000, 16_000]),
                  models=st.sampled_from([(), ("T4",), ("P100", "V100")]))


@given(workload=st.lists(TASKS, min_size=1, max_size=12),
       free=st.lists(st.sampled_from([0, 0, 1, 49, 50, 333, 500, 999, 1000]), max_size=8),
       cpu=st.integers(0, 100_000), model=st.sampled_from(["T4", "P100", "A100"]))
def test_the_cached_table_measure_equals_the_definition(workload: list[TaskClass], free: list[int], cpu: int,
                                                        model: str) -> None:
    cache = StrandCache(tuple(workload))
    want = stranded(free, cpu_free=cpu, model=model, workload=tuple(workload), weights=cache.weights)
    assert cache.get(free, cpu_free=cpu, model=model) == want
    assert cache.get(list(reversed(free)), cpu_free=cpu, model=model) == want  # the memoised entry


def test_fgd_strand_breaks_fgds_tie_towards_the_node_that_strands_nothing() -> None:
    nodes = (node("a", gpus=4, cpu=40_000), node("b", gpus=4, cpu=100_000))
    heavy = pod("y", milli=1000, cpu=25_000)
    # FGD: the class still fits on both afterwards (Δ = 0, a tie): node order picks a
    assert request(cluster("fgd", *nodes, target=(WHOLE,)), heavy) == ("a", ("a-gpu-0",))
    # a keeps 3 GPUs but 15 cores (1 pod): 2 GPUs stranded; b strands none
    assert request(cluster("fgd-strand", *nodes, target=(WHOLE,)), heavy) == ("b", ("b-gpu-0",))


def test_fgd_strand_keeps_fgds_node_when_it_strands_nothing_more() -> None:
    nodes = (node("a", gpus=4, cpu=100_000), node("b", gpus=4, cpu=25_000))
    light = pod("y", milli=1000, cpu=5000)
    # FGD ties a and b (Δ = 0). b would even *reduce* stranding (4 GPUs, CPU for 2 pods → 3 GPUs,
    # CPU for 2: 2000 → 1000), but a strands nothing more, so FGD's first node is kept
    assert request(cluster("fgd-strand", *nodes, target=(WHOLE,)), light) == ("a", ("a-gpu-0",))


def test_fgd_strand_never_trades_fgds_score_for_less_stranding() -> None:
    share = (TaskClass(weight=1.0, milli=500, count=1, cpu_milli=1000),)
    w = integer_weights(share)
    nodes = (node("a", gpus=2, cpu=4000), node("b", gpus=1, cpu=64_000, model="T4"))
    for strategy in ("fgd", "fgd-strand"):
        state = cluster(strategy, *nodes, target=share)
        assert request(state, pod("pin", milli=300, models=("T4",))) == ("b", ("b-gpu-0",))
        # a: [1000, 1000] → [500, 1000], the class still fits: FGD Δ = 0 (score 50), but CPU
        # for 2 pods where the GPUs hold 3 strands 500; b: [700] → [200]: Δ = +200 (score 45)
        assert request(state, pod("y", milli=500, cpu=2000)) == ("a", ("a-gpu-0",)), strategy
    assert stranded([500, 1000], cpu_free=2000, model="P100", workload=share, weights=w) == 500 * WEIGHT_SCALE
    assert stranded([1000, 1000], cpu_free=4000, model="P100", workload=share, weights=w) == 0


def test_a_cpu_only_pod_goes_where_no_gpu_class_can_use_the_free_gpu() -> None:
    nodes = (node("a", gpus=2, cpu=100_000), node("b", gpus=1, cpu=100_000, model="T4"))
    cpu_pod = pod("cpu", milli=0, count=0, cpu=8000)
    for strategy, want in (("fgd", "a"), ("fgd-strand", "b")):
        state = cluster(strategy, *nodes, target=(WHOLE,))
        assert request(state, pod("pin", milli=1000, models=("T4",))) == ("b", ("b-gpu-0",))
        # CPU is ample on both, so FGD ties them (Δ = 0) and takes a, whose two free GPUs still
        # want CPU; fgd-strand spends b's CPU, which no GPU class can use any more
        assert (request(state, cpu_pod) or ("",))[0] == want, strategy
    # while a GPU class still fits b, b is no better than a: FGD's node
    half = (TaskClass(weight=1.0, milli=500, count=1, cpu_milli=1000),)
    state = cluster("fgd-strand", *nodes, target=half)
    assert request(state, pod("pin", milli=400, models=("T4",))) == ("b", ("b-gpu-0",))
    assert (request(state, cpu_pod) or ("",))[0] == "a"


def test_cpu_fragment_is_the_free_cpu_that_a_larger_cpu_only_class_cannot_use() -> None:
    w = integer_weights(MIXED)
    classes = cpu_classes(MIXED, w)
    assert classes == ((8000, round(0.2 * WEIGHT_SCALE)),)  # only the CPU-only class counts
    assert cpu_fragment(20_000, classes) == 0  # 8 cores fit: nothing is fragment
    assert cpu_fragment(8000, classes) == 0
    assert cpu_fragment(5000, classes) == 5000 * round(0.2 * WEIGHT_SCALE)
    assert cpu_fragment(0, classes) == 0  # no CPU left, no fragment
    two = (TaskClass(weight=0.5, milli=0, count=0, cpu_milli=4000),
           TaskClass(weight=0.5, milli=0, count=0, cpu_milli=32_000))
    both = cpu_classes(two, integer_weights(two))
    assert cpu_fragment(3000, both) == 3000 * WEIGHT_SCALE  # neither fits
    assert cpu_fragment(10_000, both) == 10_000 * (WEIGHT_SCALE // 2)  # only the 32-core class misses it


def test_a_cpu_only_pod_does_not_cut_a_used_up_nodes_cpu_into_unusable_pieces() -> None:
    big = (TaskClass(weight=0.5, milli=1000, count=1, cpu_milli=4000),
           TaskClass(weight=0.5, milli=0, count=0, cpu_milli=32_000))
    nodes = (node("a", gpus=2, cpu=100_000), node("b", gpus=1, cpu=40_000, model="T4"),
             node("c", gpus=1, cpu=48_000, model="T4"))
    state = cluster("fgd-strand", *nodes, target=big)
    pinned = {(request(state, pod(f"pin-{i}", milli=1000, models=("T4",), cpu=1000)) or ("",))[0] for i in range(2)}
    assert pinned == {"b", "c"}
    # b (39 cores) and c (47) have no free GPU; 12 cores on b leave 27, which a 32-core pod cannot
    # use (fragment 0 → 27 cores); on c they leave 35 (still none): c
    assert (request(state, pod("cpu", milli=0, count=0, cpu=12_000)) or ("",))[0] == "c"
    # c now has 35 cores: 12 more leave 23 on c and 27 on b, fragments either way: FGD's node (a)
    assert (request(state, pod("cpu2", milli=0, count=0, cpu=12_000)) or ("",))[0] == "a"
    # 7 cores on b leave 32: b was 39 cores, all usable; 32 is still usable: spare, so b
    assert (request(state, pod("cpu3", milli=0, count=0, cpu=7000)) or ("",))[0] == "b"


def test_fgd_strand_is_selectable_and_the_default_stays_tensorfusions() -> None:
    assert profile.DEFAULT_STRATEGY == "node-compact-gpu-low-load"
    assert profile.DEFAULT_PROFILE.strategy_class("fgd-strand") is FgdStrand
    assert profile.DEFAULT_PROFILE.strategy_class("").name == "node-compact-gpu-low-load"


NODE_SHAPES = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([8000, 16_000, 40_000, 96_000]),
                        st.sampled_from(["P100", "T4"]))
POD_SHAPES = st.tuples(st.sampled_from([0, 1, 1, 1, 2, 4]), st.sampled_from([110, 230, 470, 500, 810, 1000]),
                       st.sampled_from([1000, 4000, 8000, 16_000, 24_000]),
                       st.sampled_from([(), ("T4",), ("P100", "T4")]))


def _trace(pods: list[tuple[int, int, int, tuple[str, ...]]]) -> list[TracePod]:
    return [TracePod(name=f"p{i}", cpu_milli=cpu, memory_bytes=2**30, count=k,
                     milli=(1000 if k > 1 else milli) if k else 0, models=models)
            for i, (k, milli, cpu, models) in enumerate(pods)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(NODE_SHAPES, min_size=2, max_size=8), pods=st.lists(POD_SHAPES, min_size=1, max_size=60))
def test_every_choice_has_fgds_best_score_and_is_fgds_unless_the_tie_break_prefers_another(
        nodes: list, pods: list) -> None:  # type: ignore[type-arg]
    ref = ReferenceScheduler(target=MIXED)
    sim = cluster("fgd-strand", *[node(f"n{i}", gpus=g, cpu=c, model=m) for i, (g, c, m) in enumerate(nodes)],
                  scheduler=ref)
    mine = FgdStrand(MIXED)
    for i, p in enumerate(_trace(pods)):
        spec = p.spec(pool=POOL)
        need, chain = ref.prepare(spec)
        ctx = Context(sim.state.pool_config(POOL))
        rows = []  # (name, FGD score, tie-break: higher is better, FGD's GPUs), in node order
        for name in sorted(sim.state.pool_nodes.get(POOL, ())):
            cands = ref.node_fit(sim.state, name, need, chain, ctx)
            if cands is None:
                continue
            n = sim.state.nodes[name]
            members = [sim.state.gpus[g] for g in n.gpus]
            opt = mine.option(n, members, cands, need)
            if p.count == 0:  # CPU-only: a node whose free GPU no GPU class of M can still use
                frag = mine.node_frag(n, members)  # FGD's free milli per GPU and model
                fits = any(c.count and sum(r // max(c.milli, 1) for r in frag.free) >= c.count
                           and (not c.models or frag.model in c.models) for c in MIXED)
                # ... and where the CPU left is no more fragmented for M's CPU-only class (8 cores)
                left = frag.cpu - need.cpu_milli
                worse = 0 < left < 8000 <= frag.cpu
                tie = -1 if fits or worse else 0
            else:  # a GPU request: the least stranding increase, clipped at 0
                tie = -max(0, mine.stranding_delta(n, members, opt.gpus, need))
            rows.append((name, sigmoid_score(opt.delta), tie, tuple(g.spec.name for g in opt.gpus)))
        got = request(sim, msgspec.structs.replace(p, name=f"{i}-{p.name}"))
        if not rows:
            assert got is None
            continue
        best = max(r[1] for r in rows)
        tied = [r for r in rows if r[1] == best]
        fgd = tied[0]  # FGD: highest score, first node in order
        assert got is not None
        chosen = next(r for r in rows if r[0] == got[0])
        assert chosen[1] == best  # never a node FGD scores lower
        assert chosen[2] == max(r[2] for r in tied)
        if fgd[2] == chosen[2]:  # the tie-break does not prefer another node: FGD's choice
            assert got == (fgd[0], fgd[3])
        else:
            assert chosen[2] > fgd[2]
