"""Preemption invariants (hypothesis): victims are always of strictly lower priority, unprotected
and in scope; the chosen plan is as good as a brute-force search over every node and every
subset of candidates (kube-scheduler's order: highest victim priority, Σ priority, count); usage
stays the sum of live charges and replay equals live after every step; the optimised Scheduler
preempts exactly like the ReferenceScheduler."""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, PoolConfig, Resources, priority_of
from services.allocator.domain import Scheduler, digest
from services.allocator.domain.deadlines import protected_until
from services.allocator.domain.model import GRANTED
from services.allocator.domain.preempting import may_preempt
from services.allocator.domain.preemption import CANDIDATE_PERCENT, MIN_CANDIDATES, NoPlan, find
from services.allocator.domain.reclaim import may_take, try_take
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.trial import Trial
from services.allocator.domain.victim_choice import Key, Plan, best_on_node, key_of, lower_bound, tightened_bound
from services.allocator.domain.victims import PROTECTION_KEY, CandidateSet, Refusals, candidates_on, ranked_on
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_share

PRIORITIES = (None, None, -5, 5, 500)
QOS = ("low", "medium", "high", "critical")
UIDS = tuple(f"u{i}" for i in range(16))


def brute_force(state: ClusterState, spec: AllocationSpec, now: datetime) -> Key | None:
    """The best key over every node of the pool and every non-empty subset of its candidates."""
    scheduler = Scheduler()
    need, chain = scheduler.prepare(spec)
    config = state.pool_config(spec.pool)
    strategy = scheduler.strategy(state, spec.pool)
    best: Key | None = None
    for name in sorted(state.pool_nodes.get(spec.pool, ())):
        cands = candidates_on(state, ranked_on(state, name), priority=priority_of(spec), namespace=spec.namespace,
                              scope=config.preemption, now=now, refusals=Refusals())
        trial = Trial(state, name, spec, need, chain, strategy, indexed=scheduler.indexed(strategy))
        for size in range(1, len(cands) + 1):
            for subset in itertools.combinations(cands, size):
                if trial.fits(subset) is not None:
                    key = key_of(subset)
                    best = key if best is None or key < best else best
    return best


@st.composite
def shares(draw: st.DrawFn) -> Resources:
    return Resources(milli_tflops=draw(st.sampled_from([10_000, 30_000, 50_000, 70_000, 100_000])),
                     vram_bytes=draw(st.sampled_from([Gi, 3 * Gi, 5 * Gi, 10 * Gi])))


class PreemptionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster()
        self.n = 0

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @initialize(nodes=st.lists(st.integers(1, 3), min_size=1, max_size=3),
                scope=st.sampled_from(["cluster", "cluster", "namespace"]))
    def start(self, nodes: list[int], scope: str) -> None:
        self.c.pool("p", preemption=scope)
        for k, n in enumerate(nodes):
            gpus = tuple(a_gpu(f"n{k}-g{i}", 100, 10 * Gi, index=i) for i in range(n))
            self.c.send(it.RegisterNode(intent_id=self._id(), node=f"n{k}", pool="p", gpus=gpus,
                                        cpu_milli=8000, memory_bytes=0))

    @rule(uid=st.sampled_from(UIDS), request=shares(), count=st.integers(1, 2), qos=st.sampled_from(QOS),
          priority=st.sampled_from(PRIORITIES), ns=st.sampled_from(["x", "y"]), protect=st.sampled_from(["", "", "5m"]),
          shared=st.sampled_from([False, False, False, True]), cpu=st.sampled_from([0, 0, 3000, 5000]))
    def request(self, uid: str, request: Resources, count: int, qos: str, priority: int | None, ns: str,
                protect: str, shared: bool, cpu: int) -> None:
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=request, limit=request,
                              gpu_count=count, qos=qos, priority=priority, isolation="shared" if shared else "soft",
                              cpu_milli=cpu,
                              attributes={PROTECTION_KEY: protect} if protect else {})
        state, now = self.c.state, self.c.now
        expected = brute_force(state, spec, now) if uid not in state.allocations else None
        planned = find(state, spec, now, self.c.scheduler) if uid not in state.allocations else None
        before = {aid: a for aid, a in state.allocations.items()}
        events = self.c.send(it.RequestAllocation(intent_id=self._id(), spec=spec))
        preempted = [e for e in events if isinstance(e, ev.AllocationPreempted) and e.preemptor == uid]
        for event in preempted:
            victim = before[event.allocation_id]
            assert priority_of(victim.spec) < priority_of(spec)
            until = protected_until(victim)
            assert until is None or now >= until
            assert state.pool_config("p").preemption == "cluster" or victim.spec.namespace == ns
        if preempted:
            assert isinstance(planned, Plan) and expected is not None
            assert planned.key == expected, (planned.key, expected)
        elif isinstance(events[0], ev.AllocationQueued):
            assert not isinstance(planned, Plan) and expected is None, "a plan existed but the request waits"

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self.c.send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))

    @rule(minutes=st.sampled_from([1, 6]))
    def tick(self, minutes: int) -> None:
        self.c.tick(60 * minutes)

    @invariant()
    def usage_is_the_sum_of_live_charges(self) -> None:
        state = self.c.state
        per_gpu: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        per_ns: dict[str, int] = defaultdict(int)
        for allocation in state.allocations.values():
            if allocation.status == GRANTED:
                per_ns[allocation.spec.namespace] += allocation.usage.requests_milli_tflops if allocation.usage else 0
                for name, charge in zip(allocation.gpus, allocation.charges, strict=True):
                    per_gpu[name][0] += charge.milli_tflops
                    per_gpu[name][1] += charge.vram_bytes
        for name, gpu in state.gpus.items():
            assert [gpu.used_milli_tflops, gpu.used_vram_bytes] == per_gpu[name]
            assert not gpu.overcommitted
        assert {ns: u.requests_milli_tflops for ns, u in state.usage.items()} == {
            ns: v for ns, v in per_ns.items() if v or ns in state.usage}

    @invariant()
    def replay_equals_live(self) -> None:
        assert self.c.replayed_digest() == digest(self.c.state)


PreemptionMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestPreemptionProperties = PreemptionMachine.TestCase


@given(priorities=st.lists(st.sampled_from([0, 0, 3, 7]), min_size=1, max_size=6),
       sizes=st.lists(st.sampled_from([10, 20, 25, 40, 50, 60]), min_size=6, max_size=6),
       need=st.sampled_from([30, 50, 75, 90]))
@settings(max_examples=200, deadline=None)
def test_never_more_than_the_brute_force_minimum_on_one_gpu(priorities: list[int], sizes: list[int],
                                                             need: int) -> None:
    """Many small victims on one GPU: the plan equals the exhaustive optimum (reprieve alone is not)."""
    c = Cluster()
    c.send(it.ConfigurePool(intent_id="cfg", pool="p", config=PoolConfig(preemption="cluster")))
    c.send(it.RegisterNode(intent_id="reg", node="n", pool="p", gpus=(a_gpu("g", 100, 10 * Gi),)))
    for k, (priority, size) in enumerate(zip(priorities, sizes, strict=False)):
        spec = AllocationSpec(allocation_id=f"v{k}", namespace="x", pod=f"v{k}", pool="p", priority=priority,
                              request=Resources(milli_tflops=size * 1000, vram_bytes=Gi),
                              limit=Resources(milli_tflops=size * 1000, vram_bytes=Gi))
        c.send(it.RequestAllocation(intent_id=f"r{k}", spec=spec))
    spec = AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", priority=10,
                          request=Resources(milli_tflops=need * 1000), limit=Resources(milli_tflops=need * 1000))
    expected = brute_force(c.state, spec, c.now)
    free = c.state.gpus["g"].available_milli_tflops
    found = find(c.state, spec, c.now, c.scheduler)
    if free >= need * 1000:
        return
    assert (found.key if isinstance(found, Plan) else None) == expected


class PreemptionEquivalence(RuleBasedStateMachine):
    """The Scheduler (priority index, static-node memo, remembered failed searches) decides every
    preemption exactly like the ReferenceScheduler (every node, nothing kept), on crowded pools."""

    def __init__(self) -> None:
        super().__init__()
        self.fast = Cluster()
        self.ref = Cluster(ReferenceScheduler())
        self.n = 0

    def _send(self, intent: it.AnyIntent) -> None:
        assert self.fast.send(intent) == self.ref.send(intent)

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @initialize(nodes=st.lists(st.integers(1, 2), min_size=2, max_size=4),
                scope=st.sampled_from(["cluster", "cluster", "namespace"]))
    def start(self, nodes: list[int], scope: str) -> None:
        self._send(it.ConfigurePool(intent_id=self._id(), pool="p", config=PoolConfig(preemption=scope)))
        self.fast.quota("y", a_quota(req=(150, 15 * Gi)))
        self.ref.quota("y", a_quota(req=(150, 15 * Gi)))
        for k, n in enumerate(nodes):
            gpus = tuple(a_gpu(f"n{k}-g{i}", 100, 10 * Gi, index=i) for i in range(n))
            self._send(it.RegisterNode(intent_id=self._id(), node=f"n{k}", pool="p", gpus=gpus,
                                       cpu_milli=8000, memory_bytes=0))

    @rule(uid=st.sampled_from(UIDS), request=shares(), count=st.integers(1, 2), qos=st.sampled_from(QOS),
          priority=st.sampled_from(PRIORITIES), ns=st.sampled_from(["x", "y"]), protect=st.sampled_from(["", "", "5m"]),
          cpu=st.sampled_from([0, 0, 2000, 6000]))
    def request(self, uid: str, request: Resources, count: int, qos: str, priority: int | None, ns: str,
                protect: str, cpu: int) -> None:
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=request, limit=request,
                              gpu_count=count, qos=qos, priority=priority, cpu_milli=cpu,
                              attributes={PROTECTION_KEY: protect} if protect else {})
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))

    @rule(minutes=st.sampled_from([1, 6]))
    def tick(self, minutes: int) -> None:
        self.fast.tick(60 * minutes)
        self.ref.tick(60 * minutes)


PreemptionEquivalence.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestPreemptionEquivalence = PreemptionEquivalence.TestCase


def test_the_cpu_bound_gives_a_node_up_only_when_its_plan_loses() -> None:
    """A node whose GPU one victim would clear but whose CPU needs two: the CPU-tightened lower
    bound equals the two-victim plan's key (the per-GPU bound says one), and a bounded search
    returns that plan exactly when it beats the bound (a tie only with ``tie_ok``)."""
    c = Cluster()
    c.send(it.ConfigurePool(intent_id="cfg", pool="p", config=PoolConfig(preemption="cluster")))
    c.send(it.RegisterNode(intent_id="reg", node="n", pool="p", gpus=(a_gpu("g", 100, 10 * Gi),),
                           cpu_milli=8000, memory_bytes=0))
    for k in range(2):
        spec = AllocationSpec(allocation_id=f"v{k}", namespace="x", pod=f"v{k}", pool="p", priority=0,
                              request=Resources(milli_tflops=50_000), limit=Resources(milli_tflops=50_000),
                              cpu_milli=3000)
        c.send(it.RequestAllocation(intent_id=f"r{k}", spec=spec))
    spec = AllocationSpec(allocation_id="crit", namespace="x", pod="crit", pool="p", priority=10,
                          request=Resources(milli_tflops=40_000), limit=Resources(milli_tflops=40_000),
                          cpu_milli=8000)
    scheduler = Scheduler()
    need, chain = scheduler.prepare(spec)
    strategy = scheduler.strategy(c.state, "p")
    trial = Trial(c.state, "n", spec, need, chain, strategy, indexed=scheduler.indexed(strategy))
    cands = candidates_on(c.state, ranked_on(c.state, "n"), priority=10, namespace="x", scope="cluster",
                          now=c.now, refusals=Refusals())
    found = CandidateSet(cands)
    plan = best_on_node(trial, found, None)
    assert plan is not None and plan.key == (0, 2 * (0 + 2**31), 2)
    lower = lower_bound(trial, found)
    assert lower[2] == 1 and tightened_bound(trial, found, lower) == plan.key
    assert best_on_node(trial, found, plan.key, tie_ok=True) == plan
    assert best_on_node(trial, found, plan.key, tie_ok=False) is None
    assert best_on_node(trial, found, (0, 3 * 2**31, 3), lower=lower) == plan


def by_the_rule(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler
                ) -> tuple[str, Key] | None:
    """kube-scheduler's rule computed plainly: every node's own best plan (an unbounded search per
    node), in node order; the first node with a plan, then up to max(100, 10 %) further nodes whose
    candidates could free enough and whose lower bound beats that first plan; the best of those by
    (key, node order). No kept results, no heap, no early stop."""
    need, chain = scheduler.prepare(spec)
    strategy = scheduler.strategy(state, spec.pool)
    scope = state.pool_config(spec.pool).preemption
    first: tuple[Key, int, str] | None = None
    chosen: list[tuple[Key, int, str]] = []
    order = list(scheduler.node_order(state, spec.pool))
    limit = max(MIN_CANDIDATES, len(order) * CANDIDATE_PERCENT // 100)
    for at, name in enumerate(order):
        cands = candidates_on(state, ranked_on(state, name), priority=priority_of(spec), namespace=spec.namespace,
                              scope=scope, now=now, refusals=Refusals())
        if not cands:
            continue
        trial = Trial(state, name, spec, need, chain, strategy, indexed=scheduler.indexed(strategy))
        plan = best_on_node(trial, CandidateSet(cands), None)
        if first is None:
            if plan is not None:
                first = (plan.key, at, name)
                chosen.append(first)
            continue
        if len(chosen) > limit or not trial.bound(cands) or lower_bound(trial, CandidateSet(cands)) >= first[0]:
            continue
        chosen.append((first[0], at, name) if plan is None else (plan.key, at, name))  # None: never below first
    if first is None:
        return None
    key, _, name = min(chosen)
    return name, key


@given(victims=st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0, 0, 0, 3]),
                                  st.sampled_from([20, 40, 50, 60]), st.sampled_from([1000, 2000, 4000])),
                        min_size=4, max_size=16),
       need=st.sampled_from([40, 50, 60, 80]), cpu=st.sampled_from([2000, 4000, 6000]),
       freed=st.lists(st.integers(0, 15), max_size=3))
@settings(max_examples=150, deadline=None)
def test_the_chosen_node_is_the_rules_first_and_again_after_releases(
        victims: list[tuple[int, int, int, int]], need: int, cpu: int, freed: list[int]) -> None:
    """Eight one-GPU nodes, CPU-bound, crowded with work of the pool's lowest priority: the plan
    (node and key) is the rule's (:func:`by_the_rule`), on the first whole search and on the
    repeated searches over kept node results after releases touch some nodes."""
    c = Cluster()
    c.send(it.ConfigurePool(intent_id="cfg", pool="p", config=PoolConfig(preemption="cluster")))
    for node in range(8):  # each node registered, then its work requested (it lands there or earlier)
        c.send(it.RegisterNode(intent_id=f"reg{node}", node=f"n{node}", pool="p",
                               gpus=(a_gpu(f"n{node}-g", 100, 10 * Gi),), cpu_milli=8000, memory_bytes=0))
        for k, (on, priority, size, vcpu) in enumerate(victims):
            if on == node:
                c.send(it.RequestAllocation(intent_id=f"r{k}", spec=AllocationSpec(
                    allocation_id=f"v{k}", namespace="x", pod=f"v{k}", pool="p", priority=priority,
                    request=Resources(milli_tflops=size * 1000), limit=Resources(milli_tflops=size * 1000),
                    cpu_milli=vcpu)))
    for step in range(len(freed) + 1):
        spec = AllocationSpec(allocation_id=f"crit{step}", namespace="x", pod="crit", pool="p", priority=10,
                              request=Resources(milli_tflops=need * 1000), limit=Resources(milli_tflops=need * 1000),
                              cpu_milli=cpu)
        found = find(c.state, spec, c.now, c.scheduler)
        expected = by_the_rule(c.state, spec, c.now, Scheduler())
        assert ((found.node, found.key) if isinstance(found, Plan) else None) == expected
        if step < len(freed):
            c.send(it.ReleaseAllocation(intent_id=f"rel{step}", allocation_id=f"v{freed[step]}"))


@given(granted=st.lists(st.sampled_from(PRIORITIES), max_size=4), priority=st.sampled_from(PRIORITIES),
       count=st.integers(1, 2), preemption=st.sampled_from(["off", "cluster", "namespace"]), shared=st.booleans())
@settings(max_examples=150, deadline=None)
def test_the_drains_quick_refusals_are_the_searches_own(granted: list[int | None], priority: int | None, count: int,
                                                        preemption: str, shared: bool) -> None:
    """What a queue drain asks before a search: ``may_preempt`` is False exactly when ``find``
    refuses without searching (codes ``off`` and ``priority``), and ``may_take`` is False only
    when ``try_take`` (reclaim first in a pool with shares, then preemption) finds nothing."""
    c = Cluster()
    c.pool("p", preemption=preemption)
    c.node("n0", "p", *(a_gpu(f"n0-g{i}", 100, 10 * Gi, index=i) for i in range(2)))
    if shared:
        c.share("sx", a_share("x", pool="p", gpus=1))
    for k, level in enumerate(granted):
        c.request(AllocationSpec(allocation_id=f"w{k}", namespace="y", pod=f"w{k}", pool="p", priority=level,
                                 request=Resources(milli_tflops=60_000, vram_bytes=Gi),
                                 limit=Resources(milli_tflops=60_000, vram_bytes=Gi)))
    spec = AllocationSpec(allocation_id="probe", namespace="x", pod="probe", pool="p", priority=priority,
                          gpu_count=count, request=Resources(milli_tflops=100_000, vram_bytes=Gi),
                          limit=Resources(milli_tflops=100_000, vram_bytes=Gi))
    state, now, scheduler = c.state, c.now, c.scheduler
    found = find(state, spec, now, scheduler)
    refused = isinstance(found, NoPlan) and found.code in ("off", "priority")
    assert may_preempt(state, spec, scheduler) == (not refused)
    if not may_take(state, spec, scheduler):
        assert isinstance(try_take(state, spec, now, scheduler, from_queue=True), NoPlan)
