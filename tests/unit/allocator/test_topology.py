"""Topology-aware GPU choice inside the chosen node (tiers, least damage) and the hard topology filter."""

from __future__ import annotations

from collections import Counter

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from events import decisions as ev
from events.values import GpuSpec
from services.allocator.domain import explain
from services.allocator.domain.model import GpuState
from services.allocator.domain.topology import best_tier, choose, least_damage, tier_of
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request


def _gpu(name: str, numa: int | None = None, group: str = "", *, index: int | None = None) -> GpuSpec:
    return msgspec.structs.replace(a_gpu(name, 100, 40 * Gi, index=index), numa_node=numa, interconnect_group=group)


def _state(spec: GpuSpec) -> GpuState:
    return GpuState(spec=spec, node="n", pool="p", phase="Running")


def _by_name(cands: object) -> list[GpuState]:
    return sorted(cands, key=lambda g: g.spec.name)  # type: ignore[call-overload, no-any-return]


def _first(count: int) -> object:
    return lambda cands: _by_name(cands)[:count]


def test_two_gpus_prefer_one_numa_node_over_the_strategys_split() -> None:
    got = {}
    for topology in ("soft", "off"):
        c = Cluster()
        c.pool("p", topology=topology)
        c.node("n", "p", _gpu("g0", 0), _gpu("g1", 1), _gpu("g2", 0), _gpu("g3", 1), _gpu("g4", 1))
        out = c.request(a_request("two", 10, Gi, pool="p", count=2))
        assert isinstance(out, ev.AllocationGranted)
        got[topology] = set(out.gpus)
    assert got == {"soft": {"g0", "g2"}, "off": {"g0", "g1"}}  # NUMA 0 is the tighter fit; off: names tie


def test_four_gpus_take_the_numa_node_that_holds_four() -> None:
    c = Cluster()
    c.node("n", "p", *[_gpu(f"g{i}", i % 2) for i in range(7)])  # NUMA 0: g0 g2 g4 g6, NUMA 1: g1 g3 g5
    out = c.request(a_request("four", 10, Gi, pool="p", count=4))
    assert isinstance(out, ev.AllocationGranted) and set(out.gpus) == {"g0", "g2", "g4", "g6"}
    c.node("m", "q", *[_gpu(f"h{i}", i % 2) for i in range(6)])  # 3 + 3: no NUMA node holds four
    spread = c.request(a_request("spread", 10, Gi, pool="q", count=4))
    assert isinstance(spread, ev.AllocationGranted)
    assert sorted(Counter(c.state.gpus[g].spec.numa_node for g in spread.gpus).values()) == [1, 3]


def test_nvlink_group_beats_numa_and_the_tightest_group_wins() -> None:
    c = Cluster()
    c.node("n", "p", _gpu("a0", 0, "nvA"), _gpu("a1", 0, "nvA"), _gpu("a2", 0, "nvA"),
           _gpu("b0", 1, "nvB"), _gpu("b1", 1, "nvB"), _gpu("c0", 0), _gpu("c1", 0))
    out = c.request(a_request("two", 10, Gi, pool="p", count=2))
    assert isinstance(out, ev.AllocationGranted) and set(out.gpus) == {"b0", "b1"}
    three = c.request(a_request("three", 10, Gi, pool="p", count=3, isolation="shared"))
    assert isinstance(three, ev.AllocationGranted) and set(three.gpus) == {"a0", "a1", "a2"}


def test_one_gpu_takes_the_orphan_and_leaves_the_numa_pair_whole() -> None:
    c = Cluster()
    c.node("n", "p", _gpu("g0", 0), _gpu("g1", 0), _gpu("g2", 1))
    c.pool("p", placement="compact-first")
    out = c.request(a_request("one", 10, Gi, pool="p", isolation="shared"))
    assert isinstance(out, ev.AllocationGranted) and out.gpus == ("g2",)  # strategy alone: g0 (name order)
    pair = c.request(a_request("pair", 10, Gi, pool="p", count=2, isolation="shared"))
    assert isinstance(pair, ev.AllocationGranted) and tier_of([c.state.gpus[g] for g in pair.gpus]) == 1


def test_least_damage_order_no_peers_then_unknown_numa_then_small_domains() -> None:
    gpus = [_state(s) for s in (_gpu("nv0", 0, "x"), _gpu("nv1", 0, "x"), _gpu("big0", 1), _gpu("big1", 1),
                                _gpu("solo", 2), _gpu("unknown"))]
    assert [g.spec.name for g in least_damage(gpus)] == ["unknown"]
    assert [g.spec.name for g in least_damage(gpus[:5])] == ["solo"]
    assert [g.spec.name for g in least_damage(gpus[:4])] == ["big0", "big1"]


def test_soft_topology_never_reorders_nodes_and_hard_filters_them() -> None:
    c = Cluster()
    c.node("a-split", "p", _gpu("a0", 0), _gpu("a1", 1), _gpu("a-busy", 0, index=5))
    c.node("b-together", "p", _gpu("b0", 0), _gpu("b1", 0))
    c.pool("p", placement="compact-first")
    c.request(a_request("filler", 5, Gi, pool="p", gpu_indices=(5,)))  # makes a-split the fullest node
    assert c.state.allocations["filler"].node == "a-split"
    soft = c.request(a_request("soft", 10, Gi, pool="p", count=2, isolation="shared"))
    assert isinstance(soft, ev.AllocationGranted) and soft.node == "a-split"  # PR #759: node order is the strategy's
    c.release("soft")
    c.pool("p", placement="compact-first", topology="hard", max_topology_tier=1)
    hard = c.request(a_request("hard", 10, Gi, pool="p", count=2, isolation="shared"))
    assert isinstance(hard, ev.AllocationGranted) and hard.node == "b-together"
    counts = {f.name: f.removed for f in explain(c.state, a_request("x", 10, Gi, pool="p", count=2,
                                                                     isolation="shared"))}
    assert counts["TopologyFilter"] == 2 and counts["SharedWholeGPUFilter"] == 3  # a0 + a1 split; the rest busy


def test_hard_max_tier_can_make_a_request_never_fit_and_one_gpu_is_never_filtered() -> None:
    c = Cluster()
    c.pool("p", topology="hard", max_topology_tier=0)
    c.node("n", "p", _gpu("g0", 0), _gpu("g1", 0))
    out = c.request(a_request("two", 10, Gi, pool="p", count=2))
    assert isinstance(out, ev.AllocationRejected) and "TopologyFilter removed 2" in out.reason
    assert isinstance(c.request(a_request("one", 10, Gi, pool="p")), ev.AllocationGranted)
    c.pool("p", topology="hard", max_topology_tier=1)
    assert isinstance(c.request(a_request("two-b", 10, Gi, pool="p", count=2)), ev.AllocationGranted)


numas = st.sampled_from([None, 0, 1, 2])
groups = st.sampled_from(["", "", "x", "y"])


@given(st.lists(st.tuples(numas, groups), min_size=1, max_size=9), st.integers(1, 5))
def test_choose_reaches_the_best_tier_and_is_the_strategys_pick_without_topology(
        layout: list[tuple[int | None, str]], count: int) -> None:
    cands = [_state(_gpu(f"g{i}", numa, group)) for i, (numa, group) in enumerate(layout)]
    if len(cands) < count:
        return
    chosen = choose(cands, count, "soft", _first(count))  # type: ignore[arg-type]
    assert len(chosen) == count and len({g.spec.name for g in chosen}) == count
    assert all(any(g is c for c in cands) for g in chosen)
    assert tier_of(chosen) == best_tier(cands, count)
    assert tier_of(_by_name(cands)[:count]) >= tier_of(chosen)  # never worse than the strategy alone
    bare = [_state(_gpu(g.spec.name)) for g in cands]
    assert choose(bare, count, "soft", _first(count)) == _by_name(bare)[:count]  # type: ignore[arg-type]
    assert choose(cands, count, "off", _first(count)) == _by_name(cands)[:count]  # type: ignore[arg-type]


def test_changing_the_pool_setting_renews_the_could_it_ever_fit_answer() -> None:
    c = Cluster()
    c.node("n", "p", _gpu("g0", 0), _gpu("g1", 1))
    c.request(a_request("hog", 10, Gi, pool="p"))
    first = c.request(a_request("a", 10, Gi, pool="p", count=2, isolation="shared"))
    assert isinstance(first, ev.AllocationQueued)  # could fit once the hog leaves
    c.pool("p", topology="hard", max_topology_tier=1)
    again = c.request(a_request("b", 10, Gi, pool="p", count=2, isolation="shared"))
    assert isinstance(again, ev.AllocationRejected) and "TopologyFilter removed 2" in again.reason
