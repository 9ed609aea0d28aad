"""Kept preemption search results (domain/node_plans.py) against fresh searches (hypothesis).

A long-lived Scheduler answers the same few preemption searches again and again while the pool
changes under it (grants and releases of work of several priorities, time passing): each answer
must be the plan the ReferenceScheduler's search finds from scratch, node, GPUs, victims and key
alike, or the same reason why there is none. The repeats exercise each node's kept result, the
nodes put back when touched, and the search over the kept live node lists.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from events import intents as it
from events.values import AllocationSpec, Resources, priority_of
from services.allocator.domain import Scheduler, preemption
from services.allocator.domain.node_plans import NodePlans, NodeResult, SortKey
from services.allocator.domain.preemption import NoPlan, Plan, _kept_loser, find
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.victims import PROTECTION_KEY, CandidateSet, Refusals, candidates_on, ranked_on
from tests.unit.allocator.builders import Cluster, Gi, a_gpu

UIDS = tuple(f"w{i}" for i in range(30))
PROBES = (
    (30_000, 1, 10), (60_000, 1, 10), (90_000, 1, 10), (50_000, 2, 10), (100_000, 2, 10),
    (60_000, 1, 5), (100_000, 1, 5), (40_000, 2, 5),
)
"""(milli-TFLOPS per GPU, GPU count, priority) of the repeated searches."""


def plain_counts(state: ClusterState, spec: AllocationSpec, now: datetime) -> tuple[int, int, int]:
    """A failed search's counts computed plainly: the nodes of the pool with a candidate, and the
    lower-priority allocations protection or scope refused, over every node."""
    refusals, searched = Refusals(), 0
    for name in state.pool_nodes.get(spec.pool, ()):
        searched += bool(candidates_on(state, ranked_on(state, name), priority=priority_of(spec),
                                       namespace=spec.namespace, scope=state.pool_config(spec.pool).preemption,
                                       now=now, refusals=refusals))
    return searched, refusals.protected, refusals.out_of_scope


def plain_live(state: ClusterState, scheduler: Scheduler, plans: NodePlans) -> list[SortKey]:
    """What a kept record's ``live`` holds, computed plainly: every node of its pool in node order,
    less those its kept results say play no part (idle; no candidate, or too few to free enough)."""
    out = set(plans.idle) | {name for name, result in plans.nodes.items() if not result.cands or result.bound is False}
    names = (n for n in state.pool_nodes.get(plans.pool, ()) if n in state.nodes and n not in out)
    return sorted(scheduler.index.sort_key(n) for n in names)


def outcome(found: object) -> object:
    if isinstance(found, Plan):
        return (found.node, found.gpus, tuple(v.spec.allocation_id for v in found.victims), found.key, found.charges)
    return found


class KeptSearches(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster()
        self.kept = Scheduler()
        self.n = 0

    @initialize(nodes=st.lists(st.integers(1, 2), min_size=3, max_size=7),
                scope=st.sampled_from(["cluster", "cluster", "namespace"]))
    def start(self, nodes: list[int], scope: str) -> None:
        self.c.pool("p", preemption=scope)
        for k, count in enumerate(nodes):
            self.c.node(f"n{k}", "p", *(a_gpu(f"n{k}-g{i}", 100, 16 * Gi, index=i) for i in range(count)),
                        cpu_milli=6000, memory_bytes=0)

    @rule(uid=st.sampled_from(UIDS), tflops=st.sampled_from([20_000, 30_000, 40_000, 50_000, 70_000]),
          count=st.sampled_from([1, 1, 2]), priority=st.sampled_from([0, 3, 3, 7]), ns=st.sampled_from(["x", "y"]),
          protect=st.sampled_from(["", "", "", "5m"]), cpu=st.sampled_from([0, 1000, 2000, 3000]))
    def work(self, uid: str, tflops: int, count: int, priority: int, ns: str, protect: str, cpu: int) -> None:
        """Lower-priority work arrives (the victims a search may take)."""
        self.n += 1
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=f"{uid}-{self.n}", namespace=ns, pod=uid, pool="p", request=amount,
                              limit=amount, gpu_count=count, priority=priority, cpu_milli=cpu,
                              attributes={PROTECTION_KEY: protect} if protect else {})
        self.c.request(spec)

    @rule(pick=st.integers(0, 10**6))
    def release(self, pick: int) -> None:
        live = sorted(a for a, s in self.c.state.allocations.items() if s.status == "granted")
        if live:
            self.c.release(live[pick % len(live)])

    @rule(minutes=st.sampled_from([1, 6]))
    def tick(self, minutes: int) -> None:
        self.c.tick(60 * minutes)

    @rule(which=st.sampled_from(range(len(PROBES))), ns=st.sampled_from(["x", "y"]), times=st.integers(1, 3),
          cpu=st.sampled_from([0, 0, 3000, 5000]))
    def search(self, which: int, ns: str, times: int, cpu: int) -> None:
        """The same search, repeated: the kept answer equals a fresh reference search each time
        (with CPU the nodes lack even without their lower-priority work: ``_short_of_cpu``)."""
        tflops, count, priority = PROBES[which]
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=f"probe-{self.n}", namespace=ns, pod="probe", pool="p", request=amount,
                              limit=amount, gpu_count=count, priority=priority, cpu_milli=cpu)
        state, now = self.c.state, self.c.now
        fresh = find(state, spec, now, ReferenceScheduler())
        if isinstance(fresh, NoPlan) and fresh.code == "fit":
            assert (fresh.searched, fresh.protected, fresh.out_of_scope) == plain_counts(state, spec, now)
        expected = outcome(fresh)
        for _ in range(times):
            assert outcome(find(state, spec, now, self.kept)) == expected
            for plans in self.kept._node_plans.values():  # those caught up with the state
                if plans.live is not None and plans.mark == state.changes.seq:
                    assert list(plans.live) == plain_live(state, self.kept, plans)


KeptSearches.TestCase.settings = settings(max_examples=150, stateful_step_count=80, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
TestKeptSearches = KeptSearches.TestCase


def test_a_request_of_a_kept_search_key_is_decided_as_from_scratch() -> None:
    """The decision path: a repeated preemptor shape on a long-lived Scheduler emits what a fresh one does."""
    fast, fresh = Cluster(), Cluster(ReferenceScheduler())
    for c in (fast, fresh):
        c.pool("p")
        for k in range(4):
            c.node(f"n{k}", "p", a_gpu(f"n{k}-g0", 100, 16 * Gi, index=0), a_gpu(f"n{k}-g1", 100, 16 * Gi, index=1))
    for i in range(16):
        amount = Resources(milli_tflops=40_000 + 10_000 * (i % 3), vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=f"low-{i}", namespace="x", pod=f"low-{i}", pool="p", request=amount,
                              limit=amount, priority=i % 3)
        assert fast.request(spec) == fresh.request(spec)
    for i in range(6):
        amount = Resources(milli_tflops=80_000, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=f"high-{i}", namespace="y", pod=f"high-{i}", pool="p", request=amount,
                              limit=amount, priority=10)
        assert fast.send(it.RequestAllocation(intent_id=f"h{i}", spec=spec)) == fresh.send(
            it.RequestAllocation(intent_id=f"h{i}", spec=spec))


def test_a_kept_result_is_skipped_only_when_it_loses_against_every_better_plan() -> None:
    """The repeated search leaves out of its dry-run queue (but counts toward the candidate limit)
    exactly the kept results that cannot beat the best plan: worse or equal keys (the node comes
    after the best plan's node in node order, so a tie never goes its way, and a later best plan
    has a lower key); a better, unknown or unbounded result must be searched."""
    best = (5, 2 * (5 + 2**31), 2)
    worse, same, better = (5, 2 * (5 + 2**31), 3), best, (5, 5 + 2**31, 1)

    def result(plan: object, beaten: tuple[tuple[int, int, int], bool] | None = None) -> NodeResult:
        node = NodeResult(CandidateSet([]))
        node.plan, node.beaten = plan, beaten
        return node

    def plan(key: tuple[int, int, int]) -> Plan:
        return Plan("n1", ("g1",), (), (), key)

    assert _kept_loser(result(plan(worse)), best)
    assert _kept_loser(result(plan(same)), best)
    assert not _kept_loser(result(plan(better)), best)
    assert _kept_loser(result(None), best)  # no plan at all
    assert _kept_loser(result(None, (worse, True)), best)
    assert _kept_loser(result(None, (same, False)), best)  # no plan below best: a tie cannot win here
    assert not _kept_loser(result(None, (better, False)), best)
    assert not _kept_loser(NodeResult(CandidateSet([])), best)  # not searched yet


def twins(nodes: int, work: tuple[tuple[str, str, int, int], ...]) -> tuple[Cluster, Cluster]:
    """A long-lived Scheduler and a ReferenceScheduler over the same pool "p" of ``nodes`` one-GPU
    nodes (n0, n1, ...; 100 TFLOPS), with ``work`` ((allocation id, the node it lands on,
    milli-TFLOPS, priority), namespace x) granted alike on both."""
    fast, fresh = Cluster(), Cluster(ReferenceScheduler())
    for c in (fast, fresh):
        c.pool("p")
        for k in range(nodes):
            c.node(f"n{k}", "p", a_gpu(f"n{k}-g0", 100, 16 * Gi, index=0))
    for uid, _, tflops, priority in work:
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=uid, namespace="x", pod=uid, pool="p", request=amount, limit=amount,
                              priority=priority)
        assert fast.request(spec) == fresh.request(spec)
    assert {a: s.node for a, s in fast.state.allocations.items()} == {uid: node for uid, node, _, _ in work}
    return fast, fresh


def test_a_remembered_failure_is_searched_again_where_room_above_the_request_came_back() -> None:
    """A failed search is remembered; a release of work the request may not take (priority at or
    above its own) on a node the failure searched gives that room back, so the next search must
    find the plan there, as a fresh one does; a release of a candidate does not (no walk needed)."""
    fast, fresh = twins(2, (("high-0", "n0", 60_000, 7), ("low-0", "n0", 40_000, 0), ("high-1", "n1", 100_000, 7)))
    amount = Resources(milli_tflops=70_000, vram_bytes=Gi)
    probe = AllocationSpec(allocation_id="probe", namespace="y", pod="probe", pool="p", request=amount,
                           limit=amount, priority=5)
    assert isinstance(find(fast.state, probe, fast.now, fast.scheduler), NoPlan)  # remembered
    assert fast.release("high-0") == fresh.release("high-0")  # room at priority 7 comes back on n0
    found = find(fast.state, probe, fast.now, fast.scheduler)
    assert outcome(found) == outcome(find(fresh.state, probe, fresh.now, ReferenceScheduler()))
    assert isinstance(found, Plan) and found.node == "n0"


def test_a_plan_found_by_the_walk_of_touched_nodes_keeps_the_remembered_failure() -> None:
    """A failed search is remembered; room coming back on n0 lets the next search, which walks only
    the nodes touched since, find a plan there. That plan leaves the failure true of every node
    untouched since it (n1, n2), so the memo is kept, not forgotten: the next request of the same
    shape, queued once the plan is taken, is searched over the touched nodes only (n0) and is
    decided, reason and counts alike, as a fresh search decides it."""
    fast, fresh = twins(3, (("high-0", "n0", 60_000, 7), ("low-0", "n0", 40_000, 0), ("high-1", "n1", 80_000, 7),
                            ("low-1", "n1", 20_000, 0), ("high-2", "n2", 90_000, 7), ("low-2", "n2", 10_000, 0)))
    amount = Resources(milli_tflops=70_000, vram_bytes=Gi)

    def probe(uid: str) -> AllocationSpec:
        return AllocationSpec(allocation_id=uid, namespace="y", pod=uid, pool="p", request=amount, limit=amount,
                              priority=5)

    assert isinstance(find(fast.state, probe("p0"), fast.now, fast.scheduler), NoPlan)
    (failure,) = fast.scheduler._no_plans.values()
    assert failure[2] == {"n0", "n1", "n2"}  # every node had a candidate, none a plan
    assert fast.release("high-0") == fresh.release("high-0")  # room at priority 7 comes back on n0
    found = find(fast.state, probe("p1"), fast.now, fast.scheduler)
    assert outcome(found) == outcome(find(fresh.state, probe("p1"), fresh.now, ReferenceScheduler()))
    assert isinstance(found, Plan) and found.node == "n0"
    assert list(fast.scheduler._no_plans.values()) == [failure], "the failure holds for n1 and n2: kept"
    taken = fast.send(it.RequestAllocation(intent_id="take", spec=probe("p1")))
    assert taken == fresh.send(it.RequestAllocation(intent_id="take", spec=probe("p1")))
    assert [type(e).__name__ for e in taken] == ["AllocationPreempted", "AllocationGranted"]  # low-0 goes
    queued = fast.send(it.RequestAllocation(intent_id="wait", spec=probe("p2")))
    assert queued == fresh.send(it.RequestAllocation(intent_id="wait", spec=probe("p2")))  # reason, counts
    assert [type(e).__name__ for e in queued] == ["AllocationQueued"]
    (again,) = fast.scheduler._no_plans.values()
    assert again[0] > failure[0], "the new failure is remembered afresh"
    assert again[2] == {"n1", "n2"}  # n0 holds only the probe's priority now: no candidate there


@pytest.mark.parametrize("protected", [False, True])
def test_a_remembered_failure_holds_without_a_walk_where_the_touched_nodes_lack_the_cpu(
        monkeypatch: pytest.MonkeyPatch, protected: bool) -> None:
    """Room above the request's priority comes back on n0, and a candidate lands on n1, which the
    failure passed over: a walk would find no plan on either, as both lack the request's CPU even
    with every lower-priority allocation gone. The failure is then answered from the memo, counts
    included, without a walk; unless the work landing on n1 is under eviction protection, which
    the walk must count as refused. Once the CPU comes back on n0, the walk finds the plan there.
    Every answer is a fresh search's."""
    fast, fresh = Cluster(), Cluster(ReferenceScheduler())
    for c in (fast, fresh):
        c.pool("p")
        for k in range(2):
            c.node(f"n{k}", "p", a_gpu(f"n{k}-g0", 100, 16 * Gi, index=0), cpu_milli=4000)

    def grant(uid: str, tflops: int, priority: int, cpu: int, protect: bool = False) -> None:
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=uid, namespace="x", pod=uid, pool="p", request=amount, limit=amount,
                              priority=priority, cpu_milli=cpu, attributes={PROTECTION_KEY: "1h"} if protect else {})
        assert fast.request(spec) == fresh.request(spec)

    for uid, tflops, priority, cpu in (("hog", 10_000, 7, 3500), ("high-0", 50_000, 7, 0), ("low-0", 40_000, 0, 0),
                                       ("high-1", 90_000, 7, 3800)):
        grant(uid, tflops, priority, cpu)
    assert {a: s.node for a, s in fast.state.allocations.items()} == {
        "hog": "n0", "high-0": "n0", "low-0": "n0", "high-1": "n1"}
    amount = Resources(milli_tflops=70_000, vram_bytes=Gi)
    probe = AllocationSpec(allocation_id="probe", namespace="y", pod="probe", pool="p", request=amount,
                           limit=amount, priority=5, cpu_milli=1000)

    def both() -> object:
        found = find(fast.state, probe, fast.now, fast.scheduler)
        assert outcome(found) == outcome(find(fresh.state, probe, fresh.now, ReferenceScheduler()))
        return found

    assert isinstance(both(), NoPlan)  # remembered: n0 searched, no candidate on n1
    grant("low-1", 10_000, 0, 0, protect=protected)  # n0 is full: it lands on n1
    assert fast.release("high-0") == fresh.release("high-0")  # room at priority 7 comes back on n0

    class NoWalk:
        def __init__(self, *args: object) -> None:
            raise AssertionError("the remembered failure should answer without a walk")

    with monkeypatch.context() as patched:
        if not protected:
            patched.setattr(preemption, "_Search", NoWalk)
        failed = find(fast.state, probe, fast.now, fast.scheduler)
    assert outcome(failed) == outcome(find(fresh.state, probe, fresh.now, ReferenceScheduler()))
    assert isinstance(failed, NoPlan)
    assert (failed.searched, failed.protected) == ((1, 1) if protected else (2, 0))  # n1 refused, or counted
    assert fast.release("hog") == fresh.release("hog")  # the CPU comes back on n0
    found = both()
    assert isinstance(found, Plan) and found.node == "n0" and found.victims[0].spec.allocation_id == "low-0"


def test_a_remembered_failure_is_searched_again_where_a_node_it_passed_over_gains_a_candidate() -> None:
    """A node without lower-priority work is passed over by a failed search; once work below the
    request's priority lands there, the next search must walk it (its room with that work gone may
    hold the request), as a fresh one does."""
    fast, fresh = Cluster(), Cluster(ReferenceScheduler())
    for c in (fast, fresh):
        c.pool("p")
        for k in range(3):
            c.node(f"n{k}", "p", a_gpu(f"n{k}-g0", 100, 16 * Gi, index=0))

    def grant(uid: str, tflops: int, priority: int) -> None:
        amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=uid, namespace="x", pod=uid, pool="p", request=amount, limit=amount,
                              priority=priority)
        assert fast.request(spec) == fresh.request(spec)

    grant("high-0", 100_000, 7)
    grant("high-1", 90_000, 7)
    grant("low-1", 10_000, 0)  # the only candidate (on n1): not enough there, so the search fails
    grant("high-2", 20_000, 7)
    assert {a: s.node for a, s in fast.state.allocations.items()} == {
        "high-0": "n0", "high-1": "n1", "low-1": "n1", "high-2": "n2"}
    amount = Resources(milli_tflops=70_000, vram_bytes=Gi)
    probe = AllocationSpec(allocation_id="probe", namespace="y", pod="probe", pool="p", request=amount,
                           limit=amount, priority=5)
    assert isinstance(find(fast.state, probe, fast.now, fast.scheduler), NoPlan)  # remembered: no candidate
    grant("low-2", 40_000, 0)  # a candidate lands on n2, which the failure passed over
    found = find(fast.state, probe, fast.now, fast.scheduler)
    assert outcome(found) == outcome(find(fresh.state, probe, fresh.now, ReferenceScheduler()))
    assert isinstance(found, Plan) and found.victims[0].spec.allocation_id == "low-2"


def test_a_remembered_failure_is_searched_again_where_protected_work_was_granted() -> None:
    """Work under eviction protection granted since a failure is refused as a victim: the search
    walks its node again and its explanation counts it, as a fresh one does."""
    fast, fresh = Cluster(), Cluster(ReferenceScheduler())
    for c in (fast, fresh):
        c.pool("p")
        c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi, index=0))
    amount = Resources(milli_tflops=30_000, vram_bytes=Gi)
    for uid, priority, protect in (("high", 7, ""), ("low", 0, ""), ("guarded", 0, "1h")):
        spec = AllocationSpec(allocation_id=uid, namespace="x", pod=uid, pool="p", request=amount, limit=amount,
                              priority=priority, attributes={PROTECTION_KEY: protect} if protect else {})
        assert fast.request(spec) == fresh.request(spec)
        if uid == "low":
            probe = AllocationSpec(allocation_id="probe", namespace="y", pod="probe", pool="p",
                                   request=Resources(milli_tflops=90_000, vram_bytes=Gi),
                                   limit=Resources(milli_tflops=90_000, vram_bytes=Gi), priority=5)
            assert isinstance(find(fast.state, probe, fast.now, fast.scheduler), NoPlan)  # remembered
    found = find(fast.state, probe, fast.now, fast.scheduler)
    assert isinstance(found, NoPlan) and found.protected == 1
    assert outcome(found) == outcome(find(fresh.state, probe, fresh.now, ReferenceScheduler()))


def test_a_kept_candidate_set_is_read_only_while_its_node_is_untouched_and_time_runs_on() -> None:
    """Every search key of one priority, namespace and scope reads a node's candidates from one
    kept set; a touch of the node (a release here), time running back, or protection refusing a
    candidate each make the next read a fresh build, equal to the candidates computed plainly."""
    c = Cluster()
    c.pool("p")
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi, index=0))
    amount = Resources(milli_tflops=30_000, vram_bytes=Gi)
    for uid, protect in (("low-0", ""), ("low-1", ""), ("guarded", "1h")):
        c.request(AllocationSpec(allocation_id=uid, namespace="x", pod=uid, pool="p", request=amount, limit=amount,
                                 priority=0, attributes={PROTECTION_KEY: protect} if protect else {}))
    scheduler = Scheduler()

    def read(priority: int = 5, when: datetime = c.now) -> tuple[CandidateSet, Refusals]:
        scheduler.sync(c.state)
        refusals = Refusals()
        found = scheduler.candidate_set(c.state, "n0", scheduler.ranked(c.state, "n0"), priority=priority,
                                        namespace="y", scope="cluster", now=when, refusals=refusals)
        plain = candidates_on(c.state, ranked_on(c.state, "n0"), priority=priority, namespace="y", scope="cluster",
                              now=when, refusals=Refusals())
        assert [a.spec.allocation_id for a in found.cands] == [a.spec.allocation_id for a in plain]
        return found, refusals

    guarded, refusals = read()  # protection refuses one: nothing kept, every read counts it again
    assert not guarded.keepable and refusals.protected == 1
    again, refusals = read()
    assert again is not guarded and refusals.protected == 1
    c.release("guarded")
    first, _ = read()
    assert first.keepable and read()[0] is first  # kept across reads while n0 is untouched
    assert read(when=c.now - timedelta(seconds=1))[0] is not first  # time ran back: built afresh
    c.release("low-0")  # n0 touched
    after, _ = read()
    assert after is not first and [a.spec.allocation_id for a in after.cands] == ["low-1"]
