"""The fill-up experiment with one consolidation at 100 % arrived (services/trace/defrag.py) and the
consolidation planner's ``fragmentation`` objective it uses, on tiny clusters.

Hypothesis: on random small clusters filled to 100 % arrived by random pods, a fragmentation plan
stays within its budget, moves an allocation at most once, never over-commits a GPU or a node
once its execution events are folded, predicts that executed state (placements and F(M)) and
lowers F(M) whenever it moves anything. Worked checks: without defrag the experiment's figures
are today's ``trace experiment``'s, the same seed gives the same figures, budgets parse.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from events.intents import RegisterNode
from services.allocator.domain import Scheduler, decode_snapshot, encode_snapshot, evolve
from services.allocator.domain.consolidation import Budget, execution, planned
from services.allocator.domain.model import GRANTED
from services.allocator.domain.state import ClusterState
from services.trace import defrag, experiment
from services.trace.metric import cluster_fragmentation
from services.trace.openb import TracePod
from services.trace.workload import tune, typical
from tests.unit.trace.cluster import node, pod

SMALL = [node("a", gpus=4, cpu=16_000), node("b", gpus=2, cpu=6_000), node("c", gpus=2, cpu=12_000),
         node("d", gpus=1, cpu=8_000), node("e", gpus=4, cpu=10_000)]
NODES = [node(f"{n.node}{k}", gpus=len(n.gpus), cpu=n.cpu_milli) for k in range(4) for n in SMALL]
PODS = [pod("whole", milli=1000), pod("half", milli=500, cpu=3000), pod("third", milli=300),
        pod("big", milli=700, cpu=2000), pod("pair", milli=1000, count=2, cpu=4000), pod("cpu", milli=0, count=0,
                                                                                       cpu=4000),
        pod("tiny", milli=100, cpu=500)]


def _filled(nodes: list[RegisterNode], pods: list[TracePod], strategy: str, seed: int
            ) -> tuple[ClusterState, Scheduler, int]:
    target = typical(pods)
    state, scheduler = experiment.prepared(nodes, strategy=strategy, seed=seed, target=target)
    capacity = 1000 * len(state.gpus)
    tuned = tune(pods, capacity_milli=capacity, seed=seed)
    experiment.arrive(state, scheduler, tuned[: defrag.split_at_full(tuned, capacity)])
    allocations = sum(1 for a in state.allocations.values() if a.status == GRANTED)
    return state, scheduler, allocations


def _overcommitted(state: ClusterState) -> list[str]:
    bad = [g.spec.name for g in state.gpus.values()
           if sum(c.milli_tflops for c in g.charges.values()) > g.spec.capacity.milli_tflops
           or g.used_milli_tflops > g.spec.capacity.milli_tflops]
    bad += [n.name for n in state.nodes.values() if n.cpu_milli and n.used_cpu_milli > n.cpu_milli]
    return bad


def _placements(state: ClusterState) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {a.spec.allocation_id: (a.node, tuple(a.gpus)) for a in state.allocations.values() if a.status == GRANTED}


shapes = st.lists(st.tuples(st.sampled_from([0, 100, 250, 300, 500, 700, 1000]), st.integers(1, 2),
                            st.sampled_from([500, 1000, 3000, 6000])), min_size=3, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=shapes, seed=st.integers(0, 1000), max_moves=st.integers(1, 6),
       strategy=st.sampled_from(["fgd", "fgd-strand", "node-compact-gpu-low-load", "best-fit"]))
def test_a_fragmentation_plan_is_safe_within_budget_and_lowers_fm(
        shapes: list[tuple[int, int, int]], seed: int, max_moves: int, strategy: str) -> None:
    pods = [pod("g", milli=500)] + [pod(f"p{i}", milli=milli, count=count if milli else 0, cpu=cpu)
                                    for i, (milli, count, cpu) in enumerate(shapes)]  # tune needs a GPU pod
    state, scheduler, _ = _filled(SMALL, pods, strategy, seed)
    before_digest = encode_snapshot(state)
    chosen, predicted = planned(state, experiment.POOL, Budget(max_moves=max_moves), experiment.NOW, scheduler,
                                objective="fragmentation")
    assert encode_snapshot(state) == before_digest  # a plan writes nothing
    assert chosen.objective == "fragmentation" and chosen.drains == ()
    moved = [m.allocation_id for m in chosen.moves]
    event(f"moved: {bool(moved)}")
    assert len(moved) <= max_moves and len(set(moved)) == len(moved)
    executed = decode_snapshot(encode_snapshot(state))
    for folded in execution(state, chosen, experiment.NOW):
        evolve(executed, folded)
    assert _overcommitted(executed) == []
    assert _placements(executed) == _placements(predicted)
    assert all(m.source_node != m.target_node for m in chosen.moves)
    target = typical(pods)
    frag_before = cluster_fragmentation(state, target).frag_milli
    frag_after = cluster_fragmentation(executed, target).frag_milli
    assert chosen.after.fragmented_milli_gpu == pytest.approx(frag_after, abs=1e-6)
    if moved:
        assert frag_after < frag_before
    else:
        assert frag_after == pytest.approx(frag_before)


def test_without_defrag_the_figures_are_todays_experiment() -> None:
    target = typical(PODS)
    runs = defrag.run_seed(NODES, PODS, strategy="fgd", seed=42, target=target, budgets_pct=[])
    today = experiment.run_seed(NODES, PODS, strategy="fgd", seed=42, target=target)
    curve = today.curve()
    assert len(runs) == 1 and runs[0].budget_pct == 0 and runs[0].moves == 0
    assert runs[0].unallocated_pct == {str(x): round(curve[x], 4) for x in (100, 110, 130) if x in curve}
    assert "100" in runs[0].unallocated_pct and runs[0].requests_after > 0
    state, scheduler = experiment.prepared(NODES, strategy="fgd", seed=42, target=target)
    tuned = tune(PODS, capacity_milli=today.capacity_milli, seed=42)
    granted = experiment.arrive(state, scheduler, tuned)
    assert experiment.records(tuned, granted) == (today.arrived, today.used)
    assert runs[0].accepted == sum(granted) and runs[0].requests == len(tuned)


def test_moves_respect_the_budget_and_the_same_seed_gives_the_same_figures() -> None:
    target = typical(PODS)
    first = defrag.run_seed(NODES, PODS, strategy="fgd", seed=7, target=target, budgets_pct=[1, 50])
    second = defrag.run_seed(NODES, PODS, strategy="fgd", seed=7, target=target, budgets_pct=[1, 50])
    strip = [(r.seed, r.budget_pct, r.accepted, r.moves, r.frag_after, r.unallocated_pct)
             for r in first]
    assert strip == [(r.seed, r.budget_pct, r.accepted, r.moves, r.frag_after, r.unallocated_pct) for r in second]
    without, one, half = first
    assert one.moves <= defrag.max_moves(1, one.allocations) == 1
    assert 0 < half.moves <= defrag.max_moves(50, half.allocations)
    for r in first:
        assert r.moved_pct == pytest.approx(100 * r.moves / r.allocations, abs=1e-4)
        assert r.frag_after <= r.frag_before
        assert r.requests == without.requests and r.allocations == without.allocations


def test_a_branch_without_moves_decides_as_the_run_it_was_copied_from() -> None:
    """The copy at 100 % and its fresh Scheduler decide the rest as the original state does (so a
    difference with defrag is the moves', not the copy's)."""
    target = typical(PODS)
    state, scheduler = experiment.prepared(NODES, strategy="fgd-strand", seed=3, target=target)
    capacity = 1000 * len(state.gpus)
    tuned = tune(PODS, capacity_milli=capacity, seed=3)
    split = defrag.split_at_full(tuned, capacity)
    experiment.arrive(state, scheduler, tuned[:split])
    copy = decode_snapshot(encode_snapshot(state))
    fresh = Scheduler(target=target)
    assert experiment.arrive(state, scheduler, tuned[split:], first=split) == \
        experiment.arrive(copy, fresh, tuned[split:], first=split)
    assert _placements(state) == _placements(copy)


def test_split_at_full_stops_before_the_first_pod_past_capacity() -> None:
    pods = [pod("a", milli=600), pod("b", milli=400), pod("c", milli=100), pod("d", milli=0, count=0)]
    assert defrag.split_at_full(pods, 1000) == 2
    assert defrag.split_at_full(pods, 5000) == 4
    assert defrag.split_at_full(pods, 0) == 0


@pytest.mark.parametrize(("text", "value"), [("1%", 1.0), ("5", 5.0), (" 0.5 % ", 0.5), ("100%", 100.0)])
def test_budgets_parse(text: str, value: float) -> None:
    assert defrag.parse_budget(text) == value


@pytest.mark.parametrize("text", ["0%", "-1%", "101%", "abc", "", "nan", "%"])
def test_bad_budgets_name_the_value(text: str) -> None:
    with pytest.raises(ValueError, match="defrag budget"):
        defrag.parse_budget(text)


def test_max_moves_is_at_least_one_and_at_most_the_planner_bound() -> None:
    assert defrag.max_moves(1, 50) == 1
    assert defrag.max_moves(5, 8000) == 400
    assert defrag.max_moves(100, 50_000) == 1000
