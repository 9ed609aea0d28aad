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

from hypothesis import given, settings
from hypothesis import strategies as st

from events import intents as it
from events.values import AllocationSpec, PoolConfig, Resources, priority_of
from services.allocator.domain import Scheduler
from services.allocator.domain.model import AllocationState
from services.allocator.domain.preemption import PRIORITY_OFFSET, Plan, _no_single_wins, _on_node
from services.allocator.domain.state import ClusterState
from services.allocator.domain.trial import Trial
from services.allocator.domain.victims import CandidateSet, Refusals, candidates_on, ranked_on
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
    """_on_node on a trial whose one-victim dry runs were made (as _no_single_wins makes them) and
    reused equals _on_node on a trial that makes every dry run (``monotone`` off), for no bound and
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
        _no_single_wins(kept, cands, key, False)
    for cand in itertools.islice(cands, 3):
        kept.single(cand)  # some singles known, as a repeated search finds them
    assert outcome(_on_node(kept, CandidateSet(cands), key)) == outcome(_on_node(plain, CandidateSet(cands), key))
