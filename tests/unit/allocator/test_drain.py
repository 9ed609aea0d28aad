"""The grouped queue drain against the request-by-request walk (hypothesis).

``process`` drains the queue group by group (domain/process.py: a group's failed request speaks
for the later ones until a preemption); :func:`walk` below is the drain it replaced, trying every
queued request in queue order. Two states receive the same random requests, releases and quota
changes on a small saturated pool with several priorities and namespaces; their events must be
identical after every intent.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from unittest import mock

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, PoolConfig, QuotaAmount, QuotaSpec, Resources, priority_of
from services.allocator.domain import Scheduler, decide, evolve, process
from services.allocator.domain.allocate import attempt, granted
from services.allocator.domain.model import QUEUED, AllocationState
from services.allocator.domain.need import ShapeKey, shape_key
from services.allocator.domain.placement import Grant
from services.allocator.domain.preempting import try_preempt
from services.allocator.domain.process import Hints, hints_of
from services.allocator.domain.state import ClusterState
from services.allocator.domain.victims import PROTECTION_KEY
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request

process_module = importlib.import_module("services.allocator.domain.process")  # the package exports process()
NOW = datetime(2026, 1, 1, tzinfo=UTC)
UIDS = tuple(f"u{i}" for i in range(40))


def walk(state: ClusterState, hints: Hints, now: datetime, scheduler: Scheduler) -> list[ev.AnyEvent]:
    """The drain before queue groups: every queued request in queue order (no gangs here)."""
    out: list[ev.AnyEvent] = []
    no_room: set[tuple[ShapeKey, bool]] = set()
    no_plan: set[tuple[ShapeKey, int, str]] = set()
    for allocation_id in list(state.queue):
        allocation = state.allocations.get(allocation_id)
        if allocation is None or allocation.status != QUEUED:
            continue
        spec = allocation.spec
        restrict: list[str] | None = None
        may_fit = True
        if spec.pool not in hints.pools and spec.namespace not in hints.namespaces:
            restrict = [n for n in hints.nodes if n in state.nodes and state.nodes[n].pool == spec.pool]
            if not restrict:
                continue
            scheduler.sync(state)
            need = scheduler.prepare(spec)[0]
            may_fit = any(scheduler.may_fit(n, need) for n in restrict)
        shape = shape_key(spec)
        if may_fit and (shape, True) not in no_room and (shape, restrict is None) not in no_room:
            outcome = attempt(state, spec, scheduler, restrict=restrict)
            if isinstance(outcome, Grant):
                event = granted(spec, outcome, now=now, from_queue=True)
                evolve(state, event)
                out.append(event)
                continue
            if outcome.code == "capacity":
                no_room.add((shape, restrict is None))
        tried = (shape, priority_of(spec), spec.namespace)
        if tried in no_plan:
            continue
        preempting = try_preempt(state, spec, now, scheduler, from_queue=True)
        if isinstance(preempting, list):
            for change in preempting:
                evolve(state, change)
            out.extend(preempting)
            hints.nodes.add(preempting[-1].node)  # type: ignore[union-attr]
            no_room.clear()
            no_plan.clear()
        else:
            no_plan.add(tried)
    return out


def walk_process(state: ClusterState, intent: it.AnyIntent, scheduler: Scheduler, now: datetime = NOW
                 ) -> list[ev.AnyEvent]:
    """``process`` with :func:`walk` as its drain."""
    events = decide(state, intent, now, scheduler)
    for event in events:
        evolve(state, event)
    if len(state.queue):
        hints = hints_of(state, events)
        if hints:
            events.extend(walk(state, hints, now, scheduler))
    return events


class DrainEquivalence(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.grouped, self.walked = ClusterState.empty(), ClusterState.empty()
        self.g_sched, self.w_sched = Scheduler(), Scheduler()
        self.n = 0

    def _send(self, intent: it.AnyIntent) -> None:
        a = process(self.grouped, intent, NOW, self.g_sched)
        b = walk_process(self.walked, intent, self.w_sched)
        assert a == b

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @initialize(preemption=st.sampled_from(["pool", "namespace", "off"]))
    def cluster(self, preemption: str) -> None:
        self._send(it.ConfigurePool(intent_id=self._id(), pool="p", config=PoolConfig(preemption=preemption)))
        for n in range(3):
            gpus = tuple(a_gpu(f"n{n}-g{i}", 100, 16 * Gi, index=i) for i in range(2))
            self._send(it.RegisterNode(intent_id=self._id(), node=f"n{n}", pool="p", gpus=gpus))

    @rule(uid=st.sampled_from(UIDS), tflops=st.sampled_from([40_000, 40_000, 50_000, 100_000]),
          count=st.sampled_from([1, 1, 1, 2]), ns=st.sampled_from(["a", "b"]),
          priority=st.sampled_from([None, None, 5, 500]), limit_extra=st.sampled_from([0, 0, 10_000]))
    def request(self, uid: str, tflops: int, count: int, ns: str, priority: int | None, limit_extra: int) -> None:
        request = Resources(milli_tflops=tflops, vram_bytes=Gi)
        limit = Resources(milli_tflops=tflops + limit_extra, vram_bytes=Gi)
        spec = AllocationSpec(allocation_id=f"{uid}-{self.n}", namespace=ns, pod=uid, pool="p", request=request,
                              limit=limit, gpu_count=count, priority=priority)
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS), ns=st.sampled_from(["a", "b"]), priority=st.sampled_from([None, 500]),
          twice=st.booleans())
    def small(self, uid: str, ns: str, priority: int | None, twice: bool) -> None:
        """A request of one of two common groups (so groups have several members), maybe two in a row."""
        for _ in range(1 + twice):
            self.request(uid, 40_000, 1, ns, priority, 0)

    @rule(pick=st.integers(min_value=0, max_value=10**6), queued=st.sampled_from([False, False, False, True]))
    def release(self, pick: int, queued: bool) -> None:
        live = sorted(a for a, s in self.grouped.allocations.items() if (s.status == QUEUED) == queued)
        if live:
            self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=live[pick % len(live)]))

    @rule(ns=st.sampled_from(["a", "b"]), tflops=st.sampled_from([None, 100_000, 300_000]))
    def quota(self, ns: str, tflops: int | None) -> None:
        if tflops is None:
            if ns in self.grouped.quotas:
                self._send(it.RemoveQuota(intent_id=self._id(), namespace=ns))
            return
        amount = QuotaAmount(milli_tflops=tflops)
        self._send(it.SetQuota(intent_id=self._id(), namespace=ns, spec=QuotaSpec(total_limits=amount)))

    @invariant()
    def same_queue(self) -> None:
        assert list(self.grouped.queue) == list(self.walked.queue)


DrainEquivalence.TestCase.settings = settings(max_examples=60, stateful_step_count=60, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestDrainEquivalence = DrainEquivalence.TestCase


def _protected_victim_and_r(preemption: str, victim_tflops: int) -> Cluster:
    """Pool p (``preemption``): n0 with two 100-TFLOPS GPUs, each ``victim_tflops`` taken by v
    (namespace b, priority 0, protected for 30 min), n1 with one 30-TFLOPS GPU taken by r
    (namespace c, priority 10)."""
    c = Cluster()
    c.pool("p", preemption=preemption)
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi, index=0), a_gpu("n0-g1", 100, 16 * Gi, index=1))
    c.node("n1", "p", a_gpu("n1-g0", 30, 16 * Gi, index=0))
    victim = a_request("v", victim_tflops, Gi, pool="p", ns="b", count=2, attributes={PROTECTION_KEY: "30m"})
    assert isinstance(c.request(victim), ev.AllocationGranted)
    assert isinstance(c.request(a_request("r", 30, Gi, pool="p", ns="c", priority=10)), ev.AllocationGranted)
    return c


def test_a_passed_group_resumes_after_a_preemption_frees_more_than_it_takes() -> None:
    """X1 and X2 share a group; X1 finds nothing, then P (between them in the queue) preempts a
    two-GPU victim and takes one GPU: X2 must be tried again and granted the other one."""
    c = _protected_victim_and_r("namespace", 60)
    for uid, ns, tflops in (("x1", "a", 50), ("p", "b", 100), ("x2", "a", 50)):
        assert isinstance(c.request(a_request(uid, tflops, Gi, pool="p", ns=ns, priority=5)), ev.AllocationQueued)
    c.tick(3600)  # the victim's protection is over
    walked = ClusterState.empty()
    for event in c.events:
        evolve(walked, event)
    release = it.ReleaseAllocation(intent_id="release-r", allocation_id="r")
    out = c.send(release)
    assert out == walk_process(walked, release, Scheduler(), now=c.now)
    granted_ids = [e.spec.allocation_id for e in out if isinstance(e, ev.AllocationGranted)]
    assert granted_ids == ["p", "x2"] and c.state.allocations["x1"].status == QUEUED


def _saturated() -> tuple[Cluster, ClusterState]:
    """Pool p (preemption by priority, no shares): n0's two GPUs 80 % taken by v (priority 0,
    protected until the clock moves on), n1's one small GPU by r (priority 10). Waiting: g1 and hi
    (priority 5: g1 fits n1 once r goes, hi needs a whole GPU), then y (30, priority 0: fits n1
    too) and x (50, priority 0: fits n1 never). The walked copy replays the same events."""
    c = _protected_victim_and_r("cluster", 80)
    for uid, ns, tflops, priority in (("g1", "c", 30, 5), ("hi", "b", 100, 5), ("y", "a", 30, 0), ("x", "a", 50, 0)):
        assert isinstance(c.request(a_request(uid, tflops, Gi, pool="p", ns=ns, priority=priority)),
                          ev.AllocationQueued)
    c.tick(3600)  # v's protection is over: hi may now preempt it
    walked = ClusterState.empty()
    for event in c.events:
        evolve(walked, event)
    return c, walked


def test_groups_passed_over_unseen_are_tried_again_after_a_preemption() -> None:
    """Releasing r: x (fits n1 never, priority 0 at the pool's lowest priority, so no search)
    is passed over before the walk starts, and y once g1's grant has taken n1; hi then preempts v
    and leaves a whole GPU of n0 free, where both must be tried again: y and x are granted."""
    c, walked = _saturated()
    release = it.ReleaseAllocation(intent_id="release-r", allocation_id="r")
    out = c.send(release)
    assert out == walk_process(walked, release, Scheduler(), now=c.now)
    assert [e.spec.allocation_id for e in out if isinstance(e, ev.AllocationGranted)] == ["g1", "hi", "y", "x"]
    assert [e.allocation_id for e in out if isinstance(e, ev.AllocationPreempted)] == ["v"]


def test_a_release_that_helps_no_group_tries_none_of_them() -> None:
    """Releasing g1 after the drain above frees 30 on n1's GPU for a queue left with z (50,
    priority 0, at the pool's lowest priority): z fits n1 never and may preempt nothing, so the
    drain tries no request at all (no placement walk, no preemption search)."""
    c, _ = _saturated()
    c.send(it.ReleaseAllocation(intent_id="release-r", allocation_id="r"))
    assert isinstance(c.request(a_request("z", 50, Gi, pool="p", ns="a")), ev.AllocationQueued)
    tried: list[str] = []
    one = process_module._one

    def counted(state: ClusterState, allocation: AllocationState, *args: object) -> object:
        tried.append(allocation.spec.allocation_id)
        return one(state, allocation, *args)  # type: ignore[arg-type]

    with mock.patch.object(process_module, "_one", counted):
        out = c.release("g1")
    assert [type(e) for e in out] == [ev.AllocationReleased] and tried == []
    assert c.state.allocations["z"].status == QUEUED
