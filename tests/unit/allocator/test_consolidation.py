"""The consolidation plan (services/allocator/domain/consolidation.py), dry run.

Hypothesis: on clusters filled and thinned by random requests (shares and whole GPUs, several QoS,
some under eviction protection, some gangs), with a random budget, a plan never over-commits a
GPU or a node, never moves a protected allocation or part of a gang, stays within its budget,
keeps every namespace's quota usage, leaves the state it was given untouched, and its predicted
end state (the measures after its last drain, the emptied nodes) equals the state after folding
its moves' events. Worked examples check the order, the reasons and the explanations.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events import intents as it
from events.values import PLACEMENT_STRATEGIES, GangSpec
from services.allocator.domain import ClusterState, Scheduler, decode_snapshot, digest, encode_snapshot, evolve
from services.allocator.domain.consolidation import Budget, execution, measure, plan, planned
from services.allocator.domain.model import GRANTED
from services.allocator.domain.victims import PROTECTION_KEY
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, tf


def _copy(state: ClusterState) -> ClusterState:
    return decode_snapshot(encode_snapshot(state))


def _applied(c: Cluster, events: list[ev.AnyEvent]) -> ClusterState:
    after = _copy(c.state)
    for e in events:
        evolve(after, e)
    return after


def _placements(state: ClusterState) -> tuple[dict[str, tuple[str, tuple[str, ...]]], dict[str, dict[str, int]]]:
    """Where every granted allocation is (node, GPUs) and each GPU's charges (milli-TFLOPS)."""
    return ({a.spec.allocation_id: (a.node, tuple(a.gpus)) for a in state.allocations.values() if a.status == GRANTED},
            {name: {k: v.milli_tflops for k, v in g.charges.items()} for name, g in state.gpus.items()})


asks = st.lists(st.tuples(st.sampled_from([10, 25, 40, 60, 100]), st.integers(1, 2),
                          st.sampled_from(["low", "medium", "high"]), st.booleans()), min_size=3, max_size=10)
spreading = st.sampled_from(["low-load-first", "low-load-first", *PLACEMENT_STRATEGIES])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(asks=asks, nodes=st.integers(2, 6), releases=st.sets(st.integers(0, 9), max_size=5),
       protected=st.sets(st.integers(0, 9), max_size=2), gangs=st.integers(0, 2),
       max_moves=st.integers(1, 12), share=st.sampled_from([100.0, 100.0, 50.0, 34.0]),
       max_tflops=st.sampled_from([None, None, 60, 200]), fill=spreading,
       packing=st.sampled_from(PLACEMENT_STRATEGIES), gang_fill=st.sampled_from(PLACEMENT_STRATEGIES))
def test_a_plan_is_safe_within_budget_and_predicts_its_own_end_state(
        asks: list[tuple[int, int, str, bool]], nodes: int, releases: set[int], protected: set[int], gangs: int,
        max_moves: int, share: float, max_tflops: int | None, fill: str, packing: str, gang_fill: str) -> None:
    c = Cluster()
    for n in range(nodes):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 16 * Gi, index=g) for g in range(2)),
               cpu_milli=16_000, memory_bytes=64 * Gi)
    c.pool("p", placement=gang_fill)  # packed, a gang's members share a node (it may move whole); spread, not
    for g in range(gangs):
        key = GangSpec(key=f"ns-a/g{g}", quorum=2, desired=2)
        for m in range(2):
            c.request(a_request(f"g{g}-{m}", 10, Gi, pool="p", ns="ns-a", gang=key))
    c.pool("p", placement=fill)  # filled by one strategy, consolidated by another
    for i, (tflops, count, qos, other_ns) in enumerate(asks):
        attributes = {PROTECTION_KEY: "1h"} if i in protected else {}
        c.request(a_request(f"a{i}", tflops, Gi, count=count, pool="p", qos=qos, ns="ns-b" if other_ns else "ns-a",
                            attributes=attributes, cpu_milli=1000, memory_bytes=Gi))
    for i in sorted(releases):
        c.release(f"a{i}")
    c.pool("p", placement=packing)
    c.tick(60)
    before = digest(c.state)
    budget = Budget(max_moves=max_moves, max_share_of_namespace_pct=share,
                    max_milli_tflops=None if max_tflops is None else tf(max_tflops))
    result, predicted = planned(c.state, "p", budget, c.now, Scheduler())
    assert digest(c.state) == before  # a dry run

    moves = result.moves
    assert len(moves) <= max_moves
    if max_tflops is not None:
        assert sum(m.frees.milli_tflops for m in moves) <= tf(max_tflops)
    live = [a for a in c.state.allocations.values() if a.status == GRANTED]
    moved = {m.allocation_id for m in moves}
    for ns in ("ns-a", "ns-b"):
        total = sum(1 for a in live if a.spec.namespace == ns)
        assert sum(1 for m in moves if m.namespace == ns) <= total * share // 100
    for a in live:
        if a.spec.attributes.get(PROTECTION_KEY):
            assert a.spec.allocation_id not in moved
    members: dict[str, set[str]] = defaultdict(set)
    for a in live:
        if a.spec.gang is not None:
            members[a.spec.gang.key].add(a.spec.allocation_id)
    for ids in members.values():
        assert ids <= moved or not ids & moved  # whole or not at all
    busy_before = {n.name for n in c.state.nodes.values() if n.workers}
    for m in moves:
        assert m.target_node != m.source_node and m.target_node in busy_before
        assert m.target_node not in result.nodes_emptied

    after = _applied(c, execution(c.state, result, c.now))
    for gpu in after.gpus.values():
        assert not gpu.overcommitted
    for node in after.nodes.values():
        assert node.used_cpu_milli <= node.cpu_milli and node.used_memory_bytes <= node.memory_bytes
    assert after.usage == c.state.usage  # a move keeps its quota usage
    assert {a for a, x in after.allocations.items() if x.status == GRANTED} == {a.spec.allocation_id for a in live}
    # nothing preempted or displaced: every allocation is still granted, only the moved ones elsewhere
    stayed = [a for a in live if a.spec.allocation_id not in moved]
    assert all(after.allocations[a.spec.allocation_id].node == a.node for a in stayed)
    assert measure(after, "p") == result.after
    assert _placements(predicted) == _placements(after)  # the predicted end state is the moves folded
    for name in result.nodes_emptied:
        assert not after.nodes[name].workers
    assert result.after.busy_nodes == len(busy_before) - len(result.nodes_emptied)
    assert result.before == measure(c.state, "p")


def _three_half_used_nodes() -> Cluster:
    """Three nodes of two GPUs, a 30-TFLOPS share on each (placed by low-load-first, which spreads);
    the pool then packs again (node-compact-gpu-low-load), as the plan's moves will."""
    c = Cluster()
    c.pool("p", placement="low-load-first")
    for n in range(3):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 16 * Gi, index=g) for g in range(2)))
    for n in range(3):
        c.request(a_request(f"a{n}", 30, Gi, pool="p"))
    c.pool("p", placement="node-compact-gpu-low-load")
    return c


def test_emptiest_nodes_drain_first_onto_busy_nodes_and_each_move_is_explained() -> None:
    c = _three_half_used_nodes()
    assert len({a.node for a in c.state.allocations.values()}) == 3
    result = plan(c.state, "p", Budget(max_moves=10), c.now, Scheduler())
    assert len(result.nodes_emptied) == 2
    assert (result.before.busy_nodes, result.after.busy_nodes) == (3, 1)
    assert result.after.fragmented_milli_gpu <= result.before.fragmented_milli_gpu
    first = result.drains[0]
    assert first.node == "n0" and first.moves[0].allocation_id == "a0"
    text = first.moves[0].sentence()
    assert text.startswith("move default/a0 (a0, priority 0) from n0 (n0-g0) to ") and "frees 30 TFLOPS" in text
    assert first.sentence().startswith("empties n0: 1 allocation(s) (30 TFLOPS, 1 GiB) moved to ")
    assert "pool busy nodes 3 -> 2" in first.sentence()
    assert result.skipped == () and result.stopped == ""  # the node that received the moves is not a source


def test_the_budget_of_moves_stops_the_plan_and_says_so() -> None:
    c = _three_half_used_nodes()
    result = plan(c.state, "p", Budget(max_moves=1), c.now, Scheduler())
    assert result.nodes_emptied == ("n0",) and result.skipped == ()
    assert result.stopped == "the budget of 1 move(s) is used; 1 busy node(s) not tried"  # the other received a0
    c.pool("p", placement="low-load-first")
    for n in range(3):  # a second share on every node: each drain takes two moves
        c.request(a_request(f"b{n}", 30, Gi, pool="p"))
    assert all(len(node.workers) == 2 for node in c.state.nodes.values())
    two = plan(c.state, "p", Budget(max_moves=1), c.now, Scheduler())
    assert two.moves == () and two.stopped == ""
    assert [(s.code, s.reason) for s in two.skipped] == [
        ("moves", "draining it takes 2 move(s), 1 left in the budget")] * 3


def test_protected_and_gang_members_split_across_nodes_keep_their_nodes() -> None:
    c = Cluster()
    c.pool("p", placement="low-load-first")
    for n in range(3):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 16 * Gi, index=g) for g in range(2)))
    c.request(a_request("guarded", 30, Gi, pool="p", attributes={PROTECTION_KEY: "1h"}))
    gang = GangSpec(key="default/w", quorum=2, desired=2)
    c.request(a_request("w-0", 100, Gi, pool="p", gang=gang))
    c.request(a_request("w-1", 100, Gi, pool="p", gang=gang))
    c.pool("p", placement="node-compact-gpu-low-load")
    nodes = {a: c.state.allocations[a].node for a in ("guarded", "w-0", "w-1")}
    assert len(set(nodes.values())) == 3
    result = plan(c.state, "p", Budget(max_moves=10), c.now, Scheduler())
    assert result.moves == ()
    codes = {s.node: s.code for s in result.skipped}
    assert codes == {nodes["guarded"]: "protected", nodes["w-0"]: "gang", nodes["w-1"]: "gang"}
    c.tick(3601)  # the protection is over
    assert plan(c.state, "p", Budget(max_moves=10), c.now, Scheduler()).nodes_emptied == (nodes["guarded"],)


def test_no_room_elsewhere_and_a_namespace_share_are_reasons() -> None:
    c = Cluster()
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi))
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))
    c.request(a_request("big-0", 80, Gi, pool="p"))
    c.request(a_request("big-1", 80, Gi, pool="p"))
    result = plan(c.state, "p", Budget(max_moves=5), c.now, Scheduler())
    assert [s.code for s in result.skipped] == ["no_room", "no_room"] and result.moves == ()
    assert "fits no other busy node of pool p" in result.skipped[0].reason
    c.release("big-1")
    c.request(a_request("small", 10, Gi, pool="p"))
    shy = plan(c.state, "p", Budget(max_moves=5, max_share_of_namespace_pct=40), c.now, Scheduler())
    assert shy.skipped[0].code == "namespace" and shy.moves == ()
    assert "namespace default may move 0 of its 2 allocation(s) (40 %)" in shy.skipped[0].reason


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_moves": 0}, "max_moves"), ({"max_moves": 1001}, "max_moves"),
    ({"max_moves": 1, "max_share_of_namespace_pct": 101}, "max_share_of_namespace"),
    ({"max_moves": 1, "max_milli_tflops": 0}, "max_tflops")])
def test_a_budget_out_of_range_names_its_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_an_unknown_pool_is_a_key_error() -> None:
    c = _three_half_used_nodes()
    with pytest.raises(KeyError):
        plan(c.state, "nope", Budget(max_moves=1), c.now, Scheduler())


def test_a_compute_share_moves_only_to_gpus_of_its_capacity() -> None:
    """A percent share converted on a GPU of another capacity would be charged other TFLOPS (its quota
    usage would change): it may only go to a node with GPUs of the capacity it holds."""
    c = Cluster()
    c.pool("p", placement="low-load-first")
    c.node("t4a", "p", a_gpu("t4a-g0", 100, 16 * Gi, model="T4"), a_gpu("t4a-g1", 100, 16 * Gi, model="T4"))
    c.request(a_request("share", percent=20, vram=Gi, pool="p"))  # 20 % of a 100-TFLOPS T4
    c.node("a100", "p", a_gpu("a100-g0", 200, 16 * Gi, model="A100"), a_gpu("a100-g1", 200, 16 * Gi, model="A100"))
    c.request(a_request("fixed-a", 20, Gi, pool="p", gpu_models=("A100",)))
    c.node("t4b", "p", a_gpu("t4b-g0", 100, 16 * Gi, model="T4"), a_gpu("t4b-g1", 100, 16 * Gi, model="T4"))
    c.request(a_request("fixed-t", 20, Gi, pool="p", gpu_models=("T4",)))
    assert {a: c.state.allocations[a].node for a in ("share", "fixed-a", "fixed-t")} == {
        "share": "t4a", "fixed-a": "a100", "fixed-t": "t4b"}
    c.pool("p", placement="node-compact-gpu-low-load")
    result = plan(c.state, "p", Budget(max_moves=5), c.now, Scheduler())
    assert result.nodes_emptied == ("t4a",)
    assert [(m.allocation_id, m.target_node) for m in result.moves] == [("share", "t4b")]
    assert [(s.node, s.code) for s in result.skipped] == [("a100", "no_room")]  # fixed-a asks for an A100
    after = _applied(c, execution(c.state, result, c.now))
    assert after.usage == c.state.usage


def test_a_partitioned_allocation_moves_with_its_partition() -> None:
    """A MIG allocation is placed on its target by the partition rules (template and slots recorded
    in the move, kept when the moves are folded)."""
    mig = "A100_SXM_80G"
    c = Cluster()
    c.pool("p", placement="low-load-first")
    for n in range(2):
        c.node(f"m{n}", "p", a_gpu(f"m{n}-g0", 700, 80 * Gi, model=mig, index=0))
    for uid in ("x", "y"):
        c.request(a_request(uid, pool="p", isolation="partitioned", partition_template="1g.10gb"))
    c.pool("p", placement="node-compact-gpu-low-load")
    assert {c.state.allocations[u].node for u in ("x", "y")} == {"m0", "m1"}
    result = plan(c.state, "p", Budget(max_moves=2), c.now, Scheduler())
    assert result.nodes_emptied == ("m0",)
    (move,) = result.moves
    assert move.partitions and move.partitions[0].template == "1g.10gb"
    after = _applied(c, execution(c.state, result, c.now))
    assert set(after.gpus["m1-g0"].partitions) == {"x", "y"} and not after.gpus["m0-g0"].partitions
    assert measure(after, "p") == result.after


def _place(c: Cluster, uid: str, tflops: float, node: str, gpu: str) -> None:
    """Fold a grant of ``uid`` on ``gpu`` as the log would record it (the test chooses the GPU)."""
    spec = a_request(uid, tflops, Gi, pool="p")
    evolve(c.state, ev.AllocationGranted(at=c.now, spec=spec, node=node, gpus=(gpu,), charges=(spec.request,)))


def test_a_node_that_cannot_be_emptied_leaves_every_allocation_where_it_was() -> None:
    """nA (two 60-TFLOPS shares, one GPU free) is tried first: x moves to nB's free 60, then y fits
    nowhere, so x is put back; nB is then emptied into nA's free GPU, which only works if x is
    really back on nA (else the scratch would still hold x on nB)."""
    c = Cluster()
    c.node("nA", "p", *(a_gpu(f"nA-g{g}", 100, 16 * Gi, index=g) for g in range(3)))
    c.node("nB", "p", a_gpu("nB-g0", 100, 16 * Gi))
    _place(c, "x", 60, "nA", "nA-g0")
    _place(c, "y", 60, "nA", "nA-g1")
    _place(c, "z", 40, "nB", "nB-g0")
    result, predicted = planned(c.state, "p", Budget(max_moves=5), c.now, Scheduler())
    assert [(s.node, s.code) for s in result.skipped] == [("nA", "no_room")]
    assert "default/y fits no other busy node" in result.skipped[0].reason
    assert [(m.allocation_id, m.source_node, m.target_node) for m in result.moves] == [("z", "nB", "nA")]
    assert _placements(predicted) == _placements(_applied(c, execution(c.state, result, c.now)))
    assert predicted.allocations["x"].gpus == ["nA-g0"] and predicted.allocations["y"].gpus == ["nA-g1"]


def test_a_lost_node_is_not_drained() -> None:
    c = _three_half_used_nodes()
    c.node("n0", "p", *(a_gpu(f"n0-g{g}", 100, 16 * Gi, index=g) for g in range(2)), heartbeat_ttl_s=1.0)
    c.tick(5)
    c.send(it.CheckHeartbeats(intent_id="hb"))
    assert c.state.nodes["n0"].phase == "Lost"
    result = plan(c.state, "p", Budget(max_moves=10), c.now, Scheduler())
    assert ("n0", "not_ready", "node n0 is Lost") in [(s.node, s.code, s.reason) for s in result.skipped]
    assert "n0" not in result.nodes_emptied and all(m.target_node != "n0" for m in result.moves)
