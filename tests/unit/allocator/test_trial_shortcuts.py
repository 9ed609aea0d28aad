"""The dry-run shortcuts of a preemption search (domain/trial.py, domain/preemption.py), held to
the plain computation (hypothesis).

``Trial.monotone`` claims that without a quota or partition templates a dry run that fits keeps
fitting when more victims go: the test checks it on crowded nodes (shared and soft isolation,
CPU, several GPUs, several priorities). The node's plan computed with the kept one-victim dry runs
(``Trial.single``, ``Trial.covered``: the reprieve skips dry runs whose answer is known) must be
the plan computed with every dry run made, for any bound the search could pass.
"""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import intents as it
from events.values import AllocationSpec, PoolConfig, Resources, priority_of
from services.allocator.domain import Scheduler
from services.allocator.domain.model import AllocationState
from services.allocator.domain.node_plans import NodeResult
from services.allocator.domain.preemption import _Search
from services.allocator.domain.state import ClusterState
from services.allocator.domain.trial import Trial
from services.allocator.domain.victim_choice import (
    Plan,
    best_on_node,
    lower_bound,
    no_single_wins,
    spread,
    tightened_bound,
)
from services.allocator.domain.victims import PRIORITY_OFFSET, CandidateSet, Refusals, candidates_on, ranked_on
from tests.unit.allocator.builders import Cluster, Gi, a_gpu

WORK = st.tuples(
    st.sampled_from([10_000, 20_000, 30_000, 50_000, 70_000]),  # milli-TFLOPS
    st.sampled_from([1, 2]),  # GPU count
    st.sampled_from([0, 0, 3, 7]),  # priority
    st.sampled_from(["soft", "soft", "shared"]),  # isolation
    st.sampled_from([0, 1000, 3000]),  # CPU milli
)


def crowded(gpus: int, work: list[tuple[int, int, int, str, int]]) -> ClusterState:
    """One node of ``gpus`` GPUs (100 TFLOPS, 10 GiB, 8 CPUs) with ``work`` granted where it fits."""
    c = Cluster()
    c.send(it.ConfigurePool(intent_id="cfg", pool="p", config=PoolConfig(preemption="cluster")))
    c.send(it.RegisterNode(intent_id="reg", node="n", pool="p", cpu_milli=8000, memory_bytes=0,
                           gpus=tuple(a_gpu(f"g{i}", 100, 10 * Gi, index=i) for i in range(gpus))))
    for k, (tflops, count, priority, isolation, cpu) in enumerate(work):
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        c.send(it.RequestAllocation(intent_id=f"w{k}", spec=AllocationSpec(
            allocation_id=f"w{k}", namespace="x", pod=f"w{k}", pool="p", request=amount, limit=amount,
            gpu_count=min(count, gpus), priority=priority, isolation=isolation, cpu_milli=cpu)))
    return c.state


def trial_of(state: ClusterState, spec: AllocationSpec) -> tuple[Trial, list[AllocationState]]:
    scheduler = Scheduler()
    need, chain = scheduler.prepare(spec)
    strategy = scheduler.strategy(state, "p")
    cands = candidates_on(state, ranked_on(state, "n"), priority=priority_of(spec), namespace="x", scope="cluster",
                          now=state.allocations[next(iter(state.allocations))].requested_at, refusals=Refusals())
    return Trial(state, "n", spec, need, chain, strategy, indexed=scheduler.indexed(strategy)), cands


def request(tflops: int, count: int, isolation: str, cpu: int, gpus: int) -> AllocationSpec:
    amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
    return AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", request=amount, limit=amount,
                          gpu_count=min(count, gpus), priority=10, isolation=isolation, cpu_milli=cpu)


def outcome(found: Plan | None) -> object:
    if found is None:
        return None
    return found.node, found.gpus, tuple(v.spec.allocation_id for v in found.victims), found.key, found.charges


@given(gpus=st.integers(1, 3), work=st.lists(WORK, min_size=1, max_size=7), tflops=st.sampled_from([30_000, 60_000,
       100_000]), count=st.sampled_from([1, 2]), isolation=st.sampled_from(["soft", "shared"]),
       cpu=st.sampled_from([0, 2000, 6000]), data=st.data())
@settings(max_examples=300, deadline=None)
def test_a_fit_survives_more_victims(gpus: int, work: list[tuple[int, int, int, str, int]], tflops: int, count: int,
                                     isolation: str, cpu: int, data: st.DataObject) -> None:
    """Trial.monotone: if the request fits without S, it fits without any superset of S."""
    state = crowded(gpus, work)
    trial, cands = trial_of(state, request(tflops, count, isolation, cpu, gpus))
    if not cands:
        return
    assert trial.monotone
    chosen = data.draw(st.lists(st.sampled_from(cands), unique_by=lambda a: a.spec.allocation_id))
    if trial.fits(chosen) is None:
        return
    for extra in cands:
        if all(extra is not c for c in chosen):
            assert trial.fits([*chosen, extra]) is not None


@given(gpus=st.integers(1, 3), work=st.lists(WORK, min_size=1, max_size=7), tflops=st.sampled_from([30_000, 60_000,
       100_000]), count=st.sampled_from([1, 2]), isolation=st.sampled_from(["soft", "shared"]),
       cpu=st.sampled_from([0, 2000, 6000]), beat=st.sampled_from([None, 0, 1, 2, 3]))
@settings(max_examples=300, deadline=None)
def test_the_plan_with_kept_single_dry_runs_is_the_plain_plan(
        gpus: int, work: list[tuple[int, int, int, str, int]], tflops: int, count: int, isolation: str, cpu: int,
        beat: int | None) -> None:
    """best_on_node on a trial whose one-victim dry runs were made (as no_single_wins makes them) and
    reused equals best_on_node on a trial that makes every dry run (``monotone`` off), for no bound and
    for bounds of one, two and three victims of the lowest priorities."""
    state = crowded(gpus, work)
    spec = request(tflops, count, isolation, cpu, gpus)
    kept, cands = trial_of(state, spec)
    plain, _ = trial_of(state, spec)
    plain.monotone = False
    if not cands:
        return
    key = None
    if beat is not None:
        terms = sorted(priority_of(c.spec) + PRIORITY_OFFSET for c in cands)[:max(1, beat)]
        key = (max(terms) - PRIORITY_OFFSET, sum(terms), len(terms)) if beat else (-1, 0, 0)
        no_single_wins(kept, cands, key, False)
    for cand in itertools.islice(cands, 3):
        kept.single(cand)  # some singles known, as a repeated search finds them
    found = best_on_node(kept, CandidateSet(cands), key)
    assert outcome(found) == outcome(best_on_node(plain, CandidateSet(cands), key))


RICH_WORK = st.tuples(
    st.sampled_from([30_000, 50_000, 100_000]),  # milli-TFLOPS
    st.sampled_from([1, 1, 2, 4]),  # GPU count
    st.sampled_from([0, 0, 3]),  # priority
    st.sampled_from([0, 1000, 3000]),  # CPU milli
    st.sampled_from([0, 2, 6]),  # memory GiB
)


def rich(gpus: int, work: list[tuple[int, int, int, int, int]]) -> ClusterState:
    """One node of ``gpus`` GPUs (100 TFLOPS, 10 GiB), 8 CPUs and 16 GiB of memory, ``work`` granted where it fits."""
    c = Cluster()
    c.send(it.ConfigurePool(intent_id="cfg", pool="p", config=PoolConfig(preemption="cluster")))
    c.send(it.RegisterNode(intent_id="reg", node="n", pool="p", cpu_milli=8000, memory_bytes=16 * Gi,
                           gpus=tuple(a_gpu(f"g{i}", 100, 10 * Gi, index=i) for i in range(gpus))))
    for k, (tflops, count, priority, cpu, memory) in enumerate(work):
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        c.send(it.RequestAllocation(intent_id=f"w{k}", spec=AllocationSpec(
            allocation_id=f"w{k}", namespace="x", pod=f"w{k}", pool="p", request=amount, limit=amount,
            gpu_count=min(count, gpus), priority=priority, cpu_milli=cpu, memory_bytes=memory * Gi)))
    return c.state


@given(gpus=st.integers(1, 4), work=st.lists(RICH_WORK, min_size=1, max_size=8),
       tflops=st.sampled_from([30_000, 100_000]), count=st.sampled_from([1, 2, 3, 4]),
       cpu=st.sampled_from([0, 4000, 8000]), memory=st.sampled_from([0, 8, 16]),
       beat=st.sampled_from([1, 2, 3, 4]), tie_ok=st.booleans(), isolation=st.sampled_from(["soft", "shared"]))
@settings(max_examples=400, deadline=None)
def test_a_bounded_node_search_is_the_unbounded_plan_or_none(
        gpus: int, work: list[tuple[int, int, int, int, int]], tflops: int, count: int, cpu: int, memory: int,
        beat: int, tie_ok: bool, isolation: str) -> None:
    """best_on_node against a best plan so far (``beat``: as many victims of the lowest priorities)
    returns the node's unbounded plan when that plan beats it, else None: the give-ups before the
    dry runs (CPU, memory, how the needed GPUs are held) and the exhaustive search cut by the
    bound lose no plan and invent none."""
    state = rich(gpus, work)
    amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
    spec = AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", request=amount, limit=amount,
                          gpu_count=min(count, gpus), priority=10, cpu_milli=cpu, memory_bytes=memory * Gi,
                          isolation=isolation)
    bounded, cands = trial_of(state, spec)
    plain, _ = trial_of(state, spec)
    if not cands:
        return
    terms = sorted(priority_of(c.spec) + PRIORITY_OFFSET for c in cands)[:beat]
    key = (max(terms) - PRIORITY_OFFSET, sum(terms), len(terms))
    unbounded = best_on_node(plain, CandidateSet(cands), None)
    wins = unbounded is not None and (unbounded.key <= key if tie_ok else unbounded.key < key)
    assert outcome(best_on_node(bounded, CandidateSet(cands), key, tie_ok)) == (outcome(unbounded) if wins else None)


@given(gpus=st.integers(1, 4), work=st.lists(RICH_WORK, min_size=1, max_size=7),
       count=st.sampled_from([2, 3, 4]), memory=st.sampled_from([0, 8, 16]))
@settings(max_examples=300, deadline=None)
def test_the_spread_bound_never_exceeds_the_fewest_victims_that_fit(
        gpus: int, work: list[tuple[int, int, int, int, int]], count: int, memory: int) -> None:
    """spread and the memory cover of tightened_bound are lower bounds: no subset of the candidates
    with fewer victims makes the request fit; and ``Trial.bound`` (CPU, memory, GPUs) holds for
    every subset that fits (brute force over every subset)."""
    state = rich(gpus, work)
    amount = Resources(milli_tflops=100_000, vram_bytes=Gi)
    spec = AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", request=amount, limit=amount,
                          gpu_count=min(count, gpus), priority=10, memory_bytes=memory * Gi)
    trial, cands = trial_of(state, spec)
    if not cands:
        return
    found = CandidateSet(cands)
    floor = tightened_bound(trial, found, lower_bound(trial, found))[2]
    fitting = [size for size in range(len(cands) + 1) for chosen in itertools.combinations(cands, size)
               if trial.fits(list(chosen)) is not None and trial.bound(list(chosen))]
    assert len(fitting) == sum(1 for size in range(len(cands) + 1) for chosen in itertools.combinations(cands, size)
                               if trial.fits(list(chosen)) is not None)
    fewest = min(fitting, default=None)
    assert fewest is None or min(floor, spread(trial, found)) <= max(fewest, 1)
    if fewest is not None:
        assert max(floor, spread(trial, found)) <= max(fewest, 1)


def test_a_multi_gpu_request_among_single_gpu_victims_needs_one_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four GPUs each held by one single-GPU pod: the per-GPU lower bound says one victim, the
    spread bound four (each victim frees one GPU), which is the plan's count; a search whose best
    plan so far has four victims gives the node up without a dry run."""
    state = rich(4, [(100_000, 1, 0, 0, 0)] * 4)
    amount = Resources(milli_tflops=100_000, vram_bytes=Gi)
    spec = AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", request=amount, limit=amount,
                          gpu_count=4, priority=10)
    trial, cands = trial_of(state, spec)
    found = CandidateSet(cands)
    lower = lower_bound(trial, found)
    assert lower[2] == 1 and spread(trial, found) == 4 and tightened_bound(trial, found, lower)[2] == 4
    plan = best_on_node(trial, found, None)
    assert plan is not None and plan.key[2] == 4
    fresh, _ = trial_of(state, spec)
    dry_runs: list[object] = []
    original = Trial.fits
    monkeypatch.setattr(Trial, "fits", lambda self, victims: dry_runs.append(victims) or original(self, victims))
    assert best_on_node(fresh, found, plan.key, False) is None and not dry_runs
    assert best_on_node(fresh, found, plan.key, True) is not None and dry_runs


@pytest.mark.parametrize("tie_ok", [True, False])
def test_the_cut_exhaustive_search_finds_a_plan_that_ties_the_bound(tie_ok: bool) -> None:
    """The reprieve keeps the earliest pod (50 TFLOPS) and takes two later ones (20 + 20) for a
    request lacking 30; the exhaustive search finds the earliest alone. Against a best plan so far
    of exactly one priority-0 victim, that plan ties: found only when a tie wins (``tie_ok``)."""
    state = crowded(1, [(50_000, 1, 0, "soft", 0), (20_000, 1, 0, "soft", 0), (20_000, 1, 0, "soft", 0)])
    trial, cands = trial_of(state, request(40_000, 1, "soft", 0, 1))
    plan = best_on_node(trial, CandidateSet(cands), None)
    assert plan is not None and [v.spec.allocation_id for v in plan.victims] == ["w0"]
    bounded, _ = trial_of(state, request(40_000, 1, "soft", 0, 1))
    found = best_on_node(bounded, CandidateSet(cands), plan.key, tie_ok)
    assert outcome(found) == (outcome(plan) if tie_ok else None)


@given(gpus=st.integers(1, 4), work=st.lists(RICH_WORK, min_size=1, max_size=8),
       asks=st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([0, 2000, 5000, 8000]),
                               st.sampled_from([0, 8, 16]), st.sampled_from(["soft", "shared"])),
                     min_size=2, max_size=5),
       tflops=st.sampled_from([30_000, 100_000]))
@settings(max_examples=300, deadline=None)
def test_the_node_bound_kept_across_search_keys_is_the_trial_bound(
        gpus: int, work: list[tuple[int, int, int, int, int]], asks: list[tuple[int, int, int, str]],
        tflops: int) -> None:
    """Searches of several keys (GPU count, CPU, memory, isolation; the same per-GPU amounts and
    priority, above some of the node's work) read one candidate set in turn: each key's node
    bound, with the GPU part kept with the set (``CandidateSet.enough``) by the amounts, count
    and ``shared`` alone, is ``Trial.bound`` of every candidate going for that request less its
    memory (checked by ``best_on_node``)."""
    state = rich(gpus, work)
    scheduler = Scheduler()
    amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
    shared: CandidateSet | None = None
    for count, cpu, memory, isolation in asks:
        spec = AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", request=amount,
                              limit=amount, gpu_count=min(count, gpus), priority=3, isolation=isolation,
                              cpu_milli=cpu, memory_bytes=memory * Gi)
        _, cands = trial_of(state, spec)
        if not cands:
            return
        shared = shared or CandidateSet(cands)
        need, chain = scheduler.prepare(spec)
        strategy = scheduler.strategy(state, "p")
        search = _Search(state, spec, need, chain, strategy, scheduler.indexed(strategy), scheduler, None)
        without_memory, _ = trial_of(state, msgspec.structs.replace(spec, memory_bytes=0))
        assert search.bound("n", NodeResult(shared)) == without_memory.bound(cands)
