"""Fits-nowhere summaries and known-unfit shapes (hypothesis).

The pool summaries (domain/summaries.py) may refuse a request without walking a node; they must
never refuse one that the brute-force walk (ReferenceScheduler: every node, every filter) places.
A shape that fit nowhere is walked again exactly when a node touched since could hold one share of
it, and then answers what the brute-force walk answers.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events.values import AllocationSpec, Resources
from services.allocator.domain import Scheduler
from services.allocator.domain.framework import Chain
from services.allocator.domain.index import NodeFree
from services.allocator.domain.need import Need
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.scheduler import Found
from services.allocator.domain.state import ClusterState
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request


@st.composite
def probes(draw: st.DrawFn) -> AllocationSpec:
    """A request of any kind the summaries reason about: TFLOPS or percent, VRAM, count, shared, CPU."""
    isolation = draw(st.sampled_from(["soft", "soft", "shared"]))
    percent = draw(st.sampled_from([0, 0, 30, 60, 100]))
    tflops = 0 if percent else draw(st.sampled_from([5, 20, 45, 80, 120]))
    return a_request("probe", tflops, draw(st.sampled_from([0, Gi, 10 * Gi, 30 * Gi])), pool="p",
                     percent=percent, count=draw(st.integers(1, 3)), isolation=isolation,
                     cpu_milli=draw(st.sampled_from([0, 0, 500, 4000])))


def cluster(sizes: list[tuple[int, int]], fills: list[tuple[int, int]]) -> Cluster:
    """Nodes of ``sizes`` (GPU count, TFLOPS per GPU; 2 CPU cores each), then requests of ``fills``."""
    c = Cluster()
    for n, (count, tflops) in enumerate(sizes):
        gpus = [a_gpu(f"n{n}-g{i}", tflops, 24 * Gi, index=i) for i in range(count)]
        c.node(f"n{n}", "p", *gpus, cpu_milli=2000, memory_bytes=64 * Gi)
    for i, (tflops, vram) in enumerate(fills):
        c.request(a_request(f"f{i}", tflops, vram * Gi, pool="p", cpu_milli=300))
    return c


sizes = st.lists(st.tuples(st.integers(1, 3), st.sampled_from([50, 100])), min_size=1, max_size=4)
fills = st.lists(st.tuples(st.sampled_from([10, 30, 50, 90]), st.sampled_from([1, 8, 20])), min_size=2, max_size=16)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes, fills=fills, probe=probes())
def test_summaries_never_refuse_what_the_brute_force_walk_places(
        sizes: list[tuple[int, int]], fills: list[tuple[int, int]], probe: AllocationSpec) -> None:
    c = cluster(sizes, fills)
    scheduler = c.scheduler
    scheduler.sync(c.state)
    need = scheduler.prepare(probe)[0]
    if scheduler.index.room("p").fits_nowhere(need):
        assert ReferenceScheduler().find(c.state, probe) is None
    room = scheduler.room(c.state, "p")
    assert room == ReferenceScheduler().room(c.state, "p")  # the maxima are exact, not bounds


class Counting(Scheduler):
    """A Scheduler that records the nodes of each walk after the summaries (None: the whole pool)."""

    def __init__(self) -> None:
        super().__init__()
        self.walks: list[list[str] | None] = []

    def _find(self, state: ClusterState, spec: AllocationSpec, need: Need, chain: Chain,
              restrict: Iterable[str] | None) -> Found | None:
        self.walks.append(None if restrict is None else list(restrict))
        return super()._find(state, spec, need, chain, restrict)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes, fills=fills, probe=probes(),
       changes=st.lists(st.tuples(st.booleans(), st.integers(0, 30)), min_size=1, max_size=4))
def test_a_known_unfit_shape_is_walked_again_exactly_where_a_touched_node_could_hold_it(
        sizes: list[tuple[int, int]], fills: list[tuple[int, int]], probe: AllocationSpec,
        changes: list[tuple[bool, int]]) -> None:
    """After the failed walk: releases (room freed) and new requests (room taken: a touched node
    that cannot hold the shape must not be walked)."""
    c = cluster(sizes, fills)
    counting = Counting()
    if counting.find(c.state, probe) is not None or not counting.walks:
        return  # it fits, or the summaries refused it: nothing is known-unfit
    mark = c.state.changes.seq
    for n, (release, pick) in enumerate(changes):
        live = sorted(a for a, s in c.state.allocations.items() if s.status == "granted")
        if release and live:
            assert isinstance(c.release(live[pick % len(live)])[0], ev.AllocationReleased)
        elif not release:
            c.request(a_request(f"late{n}", 1 + pick, Gi, pool="p"))
    counting.walks.clear()
    found = counting.find(c.state, probe)
    expected = ReferenceScheduler().find(c.state, probe)
    assert (found is None) == (expected is None)
    if found is not None and expected is not None:
        assert (found[0].name, [g.spec.name for g in found[1]]) == (
            expected[0].name, [g.spec.name for g in expected[1]])
    need = Need(probe)
    could = sorted(n for n in c.state.changes.nodes_since(mark) if n in c.state.nodes
                   and NodeFree([c.state.gpus[g] for g in c.state.nodes[n].gpus], c.state.nodes[n]).may_fit(need))
    if counting.index.room("p").fits_nowhere(need):
        assert counting.walks == []
    else:
        assert [sorted(w) if w is not None else None for w in counting.walks] == ([could] if could else [])


model_nodes = st.lists(st.lists(st.tuples(st.sampled_from(["A", "B"]), st.sampled_from([50, 100])),
                                min_size=1, max_size=3), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=model_nodes, fills=fills, later=st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=6),
       probe=probes(), models=st.sampled_from([("A",), ("B",), ("C",), ("A", "B")]))
def test_per_model_summaries_never_refuse_what_the_brute_force_walk_places(
        nodes: list[list[tuple[str, int]]], fills: list[tuple[int, int]], later: list[tuple[bool, int]],
        probe: AllocationSpec, models: tuple[str, ...]) -> None:
    """Rooms per GPU model, kept from the first request restricted to a model on (grants and
    releases after it re-place nodes in them): a refusal is always the brute-force walk's answer,
    and the kept rooms answer as rooms built afresh from the final state."""
    c = Cluster()
    for n, gpus in enumerate(nodes):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{i}", tflops, 24 * Gi, model=model, index=i)
                               for i, (model, tflops) in enumerate(gpus)), cpu_milli=2000, memory_bytes=64 * Gi)
    probe = msgspec.structs.replace(probe, gpu_models=models)
    c.scheduler.sync(c.state)
    c.scheduler.index.track_models("p", c.state.nodes, c.state.gpus)  # kept from here on, as a find would
    for i, (tflops, vram) in enumerate(fills):
        c.request(a_request(f"f{i}", tflops, vram * Gi, pool="p", cpu_milli=300,
                            gpu_models=(nodes[i % len(nodes)][0][0],)))
    for n, (release, pick) in enumerate(later):
        live = sorted(a for a, s in c.state.allocations.items() if s.status == "granted")
        if release and live:
            c.release(live[pick % len(live)])
        elif not release:
            c.request(a_request(f"late{n}", 1 + pick, Gi, pool="p"))
    scheduler = c.scheduler
    scheduler.sync(c.state)
    need = scheduler.prepare(probe)[0]
    refused = scheduler.index.fits_no_model("p", need)
    if refused:
        assert ReferenceScheduler().find(c.state, probe) is None
    fresh = Scheduler()
    fresh.sync(c.state)
    fresh.index.track_models("p", c.state.nodes, c.state.gpus)
    assert fresh.index.fits_no_model("p", need) == refused


def test_a_request_for_a_full_gpu_model_is_refused_without_a_walk_while_the_pool_has_room() -> None:
    c = Cluster()
    c.node("a", "p", a_gpu("a-g0", 100, 24 * Gi, model="H100"))
    c.node("b", "p", a_gpu("b-g0", 100, 24 * Gi, model="A100"))
    c.request(a_request("full", 100, Gi, pool="p", gpu_models=("H100",)))
    counting = Counting()
    assert counting.find(c.state, a_request("more", 50, Gi, pool="p", gpu_models=("H100",))) is None
    assert counting.walks == []  # the H100 room said it: nothing walked
    assert counting.find(c.state, a_request("any", 50, Gi, pool="p")) is not None  # the pool has room (A100)
    assert counting.find(c.state, a_request("either", 50, Gi, pool="p", gpu_models=("H100", "A100"))) is not None


def test_a_request_allowing_two_models_may_take_one_gpu_of_each_on_a_node() -> None:
    """No node has two GPUs of one model, yet the node with one of each gives two allowed GPUs."""
    c = Cluster()
    c.node("m", "p", a_gpu("m-g0", 100, 24 * Gi, model="H100", index=0), a_gpu("m-g1", 100, 24 * Gi, model="A100",
                                                                                 index=1))
    pair = a_request("pair", 50, Gi, pool="p", count=2, gpu_models=("H100", "A100"))
    assert ReferenceScheduler().find(c.state, pair) is not None
    found = c.scheduler.find(c.state, pair)
    assert found is not None and sorted(g.spec.name for g in found[1]) == ["m-g0", "m-g1"]
    assert c.scheduler.find(c.state, msgspec.structs.replace(pair, gpu_models=("H100",))) is None


def test_the_reason_of_a_queued_request_reads_the_summaries() -> None:
    c = cluster([(2, 100)], [(90, 1), (90, 1)])
    out = c.request(a_request("big", 50, Gi, pool="p"))
    assert isinstance(out, ev.AllocationQueued) and "largest free on one GPU: 10 TFLOPS, 23 GiB VRAM" in out.reason
    assert Resources(milli_tflops=50_000, vram_bytes=Gi) == out.spec.request
