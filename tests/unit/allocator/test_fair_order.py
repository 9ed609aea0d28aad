"""Fair-share order of waiting requests (docs/allocation.md "Fair-share ordering"): weighted dominant
share per share, usage decayed over a half-life, the grouped drain against a brute-force walk that
re-sorts the untried requests before every try (hypothesis), and the order against a brute-force sort.
"""

from __future__ import annotations

import hashlib
import importlib
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from unittest import mock

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from events import codec
from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, PoolConfig, QuotaAmount, QuotaSpec, Resources
from services.allocator.api import documents, reasons
from services.allocator.domain import Scheduler, decide, digest, evolve, fairshare, process
from services.allocator.domain.model import QUEUED, AllocationState
from services.allocator.domain.process import Hints, _Memo, _one, hints_of
from services.allocator.domain.queue import grant_order
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.state import ClusterState, decode_snapshot, encode_snapshot
from services.allocator.domain.victims import PROTECTION_KEY
from tests.unit.allocator.builders import T0, Cluster, Gi, a_gpu, a_request, a_share

process_module = importlib.import_module("services.allocator.domain.process")  # the package exports process()

UIDS = tuple(f"u{i}" for i in range(40))


def brute_key(state: ClusterState, allocation: AllocationState) -> fairshare.RankedKey:
    """A queued request's place computed from the records alone: its share found by walking the
    shares, usage recounted from the allocations, capacity summed over the pool's nodes."""
    spec = allocation.spec
    share: str | None = None
    if any(p.pool == spec.pool for s in state.shares.values() for p in s.pools):
        share = next((name for name, s in sorted(state.shares.items()) if spec.namespace in s.namespaces), "")
    return fairshare.ranked_key(grant_order(allocation), ReferenceScheduler().rank(state, spec.pool, share))


def brute_order(state: ClusterState) -> list[str]:
    """Every queued request sorted by :func:`brute_key`."""
    queued = [a for a in state.allocations.values() if a.status == QUEUED]
    return [a.spec.allocation_id for a in sorted(queued, key=lambda a: brute_key(state, a))]


def fair_walk(state: ClusterState, hints: Hints, now: datetime, scheduler: Scheduler) -> list[ev.AnyEvent]:
    """The drain by definition: the untried queued requests re-sorted before every try (the first
    is tried), each tried once; ``_one`` is the drain's own per-request step."""
    memo = _Memo()
    out: list[ev.AnyEvent] = []
    before = state.queue.next_seq
    untried = {aid for aid, a in state.allocations.items() if a.status == QUEUED and a.queue_seq < before}
    while untried:
        live = [state.allocations[aid] for aid in untried
                if aid in state.allocations and state.allocations[aid].status == QUEUED]
        if not live:
            break
        pick = min(live, key=lambda a: brute_key(state, a))
        untried.discard(pick.spec.allocation_id)
        _one(state, pick, hints, now, scheduler, memo, out)
    return out


def walk_process(state: ClusterState, intent: it.AnyIntent, now: datetime, scheduler: Scheduler
                 ) -> list[ev.AnyEvent]:
    """``process`` with :func:`fair_walk` as its drain (every drain it runs)."""
    with mock.patch.object(process_module, "drain", fair_walk):
        return process(state, intent, now, scheduler)


def granted_ids(events: list[ev.AnyEvent]) -> list[str]:
    return [e.spec.allocation_id for e in events if isinstance(e, ev.AllocationGranted)]


def two_shares(*, weight_a: int = 1, weight_b: int = 1, half_life_s: int = 0, gpus: int = 4) -> Cluster:
    """Pool p: one node of ``gpus`` GPUs (100 TFLOPS, 16 GiB each), preemption off; shares sa (ns a)
    and sb (ns b) with no guarantee; ns c in no share."""
    c = Cluster()
    c.pool("p", preemption="off", fair_share_half_life_s=half_life_s)
    c.node("n", "p", *(a_gpu(f"g{i}", 100, 16 * Gi, index=i) for i in range(gpus)))
    c.share("sa", a_share("a", pool="p", weight=weight_a))
    c.share("sb", a_share("b", pool="p", weight=weight_b))
    return c


def test_the_share_with_the_lower_dominant_share_goes_first_whatever_arrived_first() -> None:
    c = two_shares()
    for uid, ns in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("hold", "c")):
        assert isinstance(c.request(a_request(uid, 100, Gi, pool="p", ns=ns)), ev.AllocationGranted)
    # sa holds 2 GPUs (dominant share 0.5, TFLOPS), sb 1 (0.25): b's request goes first though later
    assert isinstance(c.request(a_request("a3", 100, Gi, pool="p", ns="a")), ev.AllocationQueued)
    assert isinstance(c.request(a_request("b2", 100, Gi, pool="p", ns="b")), ev.AllocationQueued)
    assert fairshare.waiting(c.state) == ["b2", "a3"] == brute_order(c.state)
    assert list(c.state.queue) == ["a3", "b2"]  # the order without shares: FIFO
    assert granted_ids(c.release("hold")) == ["b2"]


def test_one_release_divides_the_surplus_by_turns_as_the_grants_change_the_shares() -> None:
    c = two_shares(gpus=6)
    for uid, ns in (("a0", "a"), ("c0", "c"), ("c1", "c"), ("c2", "c"), ("c3", "c"), ("c4", "c")):
        c.request(a_request(uid, 100, Gi, pool="p", ns=ns))
    for uid in ("a1", "a2", "a3", "b1", "b2", "b3"):
        assert isinstance(c.request(a_request(uid, 100, Gi, pool="p", ns=uid[0])), ev.AllocationQueued)
    out: list[ev.AnyEvent] = []
    for uid in ("c0", "c1", "c2", "c3", "c4"):
        out += c.release(uid)
    # a holds 1 GPU: b goes first, then turns by dominant share (ties: FIFO), never all to one share
    assert granted_ids(out) == ["b1", "a1", "b2", "a2", "b3"]


def test_a_single_release_of_many_gpus_alternates_within_one_drain() -> None:
    c = two_shares(gpus=4)
    c.request(a_request("big", 100, Gi, pool="p", ns="c", count=4))
    for uid in ("a1", "a2", "a3", "b1", "b2", "b3"):
        c.request(a_request(uid, 100, Gi, pool="p", ns=uid[0]))
    assert granted_ids(c.release("big")) == ["a1", "b1", "a2", "b2"]


def test_weight_divides_the_dominant_share() -> None:
    c = two_shares(weight_a=2, gpus=4)
    c.request(a_request("big", 100, Gi, pool="p", ns="c", count=4))
    for uid in ("b1", "b2", "a1", "a2", "a3"):
        c.request(a_request(uid, 100, Gi, pool="p", ns=uid[0]))
    # a's weight 2: it ranks as holding half of what it holds; ties go FIFO (b1 first)
    assert granted_ids(c.release("big")) == ["b1", "a1", "a2", "b2"]


def test_priority_comes_before_the_share_order_and_unshared_namespaces_come_last() -> None:
    c = two_shares(gpus=2)
    c.request(a_request("big", 100, Gi, pool="p", ns="c", count=2))
    c.request(a_request("a-held", 10, Gi, pool="p", ns="a"))
    assert c.release("big")  # a holds 10 TFLOPS now
    c.request(a_request("fill", 90, 15 * Gi, pool="p", ns="c"))
    c.request(a_request("fill2", 100, 16 * Gi, pool="p", ns="c"))
    for uid, ns, priority in (("c-1", "c", None), ("a-1", "a", None), ("b-1", "b", None), ("a-hi", "a", 500)):
        assert isinstance(c.request(a_request(uid, 100, Gi, pool="p", ns=ns, priority=priority)),
                          ev.AllocationQueued)
    assert "fill2" in c.state.queue
    assert fairshare.waiting(c.state) == ["a-hi", "b-1", "a-1", "fill2", "c-1"] == brute_order(c.state)


def test_a_pool_without_shares_keeps_the_fifo_order_and_rank() -> None:
    c = two_shares()
    c.node("m", "q", a_gpu("q0", 100, 16 * Gi))
    c.request(a_request("q-hold", 100, Gi, pool="q", ns="b"))
    for uid, ns in (("q-b", "b"), ("q-a", "a"), ("q-c", "c")):
        c.request(a_request(uid, 100, Gi, pool="q", ns=ns))
    assert fairshare.waiting(c.state) == ["q-b", "q-a", "q-c"] == list(c.state.queue)
    assert Scheduler().rank(c.state, "q", fairshare.share_of(c.state, "q", "a")) == fairshare.NO_RANK


def _held_then_wait(c: Cluster) -> tuple[list[str], list[str]]:
    """a holds the whole pool for an hour and releases it; c then holds it; a and b each queue one
    request (a first); a minute later c releases: the waiting order before, and what is granted."""
    c.request(a_request("a-old", 100, Gi, pool="p", ns="a", count=2))
    c.tick(3600)
    c.release("a-old")
    c.request(a_request("c-hold", 100, Gi, pool="p", ns="c", count=2))
    c.request(a_request("a-wait", 100, Gi, pool="p", ns="a"))
    c.request(a_request("b-wait", 100, Gi, pool="p", ns="b"))
    waiting = fairshare.waiting(c.state)
    assert waiting == brute_order(c.state)
    c.tick(60)
    return waiting, granted_ids(c.release("c-hold"))


def test_decayed_usage_ranks_a_share_that_held_the_pool_recently_behind_one_that_did_not() -> None:
    c = two_shares(half_life_s=3600, gpus=2)
    assert _held_then_wait(c) == (["b-wait", "a-wait"], ["b-wait", "a-wait"])
    # a's average over the hour it held 2 GPUs: 2·(1 − 2^-1) = 1 GPU, then a minute holding none
    decayed = c.state.decayed["p"].shares["sa"]
    assert abs(decayed.gpus - 2.0 ** (-60 / 3600)) < 1e-9 and "sb" not in c.state.decayed["p"].shares
    assert c.replayed_digest() == digest(c.state)
    twin = decode_snapshot(encode_snapshot(c.state))
    assert digest(twin) == digest(c.state) and twin.decayed == c.state.decayed


def test_without_a_half_life_the_order_uses_the_current_usage_only() -> None:
    c = two_shares(gpus=2)
    assert _held_then_wait(c) == (["a-wait", "b-wait"], ["a-wait", "b-wait"])  # both hold nothing: FIFO
    assert not c.state.decayed


def test_a_department_competes_first_then_its_teams() -> None:
    c = two_shares(gpus=4)
    c.share("dept", msgspec.structs.replace(a_share(pool="p"), namespaces=()))
    c.share("t1", a_share("x", pool="p", parent="dept"))
    c.share("t2", a_share("y", pool="p", parent="dept"))
    c.request(a_request("x-held", 100, Gi, pool="p", ns="x", count=2))
    c.request(a_request("a-held", 50, Gi, pool="p", ns="a"))
    c.request(a_request("fill", 100, Gi, pool="p", ns="c"))
    for uid, ns in (("x1", "x"), ("y1", "y"), ("a1", "a"), ("b1", "b")):
        c.request(a_request(uid, 100, Gi, pool="p", ns=ns))
    # dept holds 2 of 4 GPUs (0.5), sa 1 (0.25: a GPU held is a GPU, whatever its TFLOPS), sb none:
    # b, a, then dept's teams: y (0) before x (0.5)
    assert fairshare.waiting(c.state) == ["b1", "a1", "y1", "x1"] == brute_order(c.state)


class FairDrainEquivalence(RuleBasedStateMachine):
    """Two states, the same intents: ``process`` (grouped drain, kept ranks) and the brute-force walk."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped, self.walked = ClusterState.empty(), ClusterState.empty()
        self.g_sched, self.w_sched = Scheduler(), Scheduler()
        self.events: list[ev.AnyEvent] = []
        self.now = T0
        self.n = 0

    def _send(self, intent: it.AnyIntent) -> None:
        a = process(self.grouped, intent, self.now, self.g_sched)
        b = walk_process(self.walked, intent, self.now, self.w_sched)
        assert a == b
        self.events.extend(a)

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @initialize(preemption=st.sampled_from(["pool", "off"]), half_life=st.sampled_from([0, 0, 600]),
                parented=st.booleans(), guaranteed=st.sampled_from([None, None, 2]))
    def cluster(self, preemption: str, half_life: int, parented: bool, guaranteed: int | None) -> None:
        """Pool p (3 nodes of 2 GPUs) with shares sa (ns a) and sb (ns b, maybe under dept), each
        maybe guaranteed 2 GPUs (then borrowed grants are reclaimed); ns c in no share; pool q none."""
        config = PoolConfig(preemption=preemption, fair_share_half_life_s=half_life)
        self._send(it.ConfigurePool(intent_id=self._id(), pool="p", config=config))
        for n in range(3):
            gpus = tuple(a_gpu(f"n{n}-g{i}", 100, 16 * Gi, index=i) for i in range(2))
            self._send(it.RegisterNode(intent_id=self._id(), node=f"n{n}", pool="p", gpus=gpus))
        self._send(it.RegisterNode(intent_id=self._id(), node="q0", pool="q",
                                   gpus=(a_gpu("q0-g0", 100, 16 * Gi),)))
        if parented:
            dept = msgspec.structs.replace(a_share(pool="p", gpus=guaranteed and 2 * guaranteed), namespaces=())
            self._send(it.SetShare(intent_id=self._id(), name="dept", spec=dept))
        self._send(it.SetShare(intent_id=self._id(), name="sa", spec=a_share("a", pool="p", gpus=guaranteed)))
        self._send(it.SetShare(intent_id=self._id(), name="sb", spec=a_share(
            "b", pool="p", gpus=guaranteed, parent="dept" if parented else "")))

    @rule(uid=st.sampled_from(UIDS), tflops=st.sampled_from([40_000, 40_000, 50_000, 100_000]),
          vram=st.sampled_from([Gi, Gi, 8 * Gi]), count=st.sampled_from([1, 1, 1, 2]),
          ns=st.sampled_from(["a", "b", "c"]), priority=st.sampled_from([None, None, 5, 500]),
          pool=st.sampled_from(["p", "p", "p", "q"]), times=st.integers(1, 3))
    def request(self, uid: str, tflops: int, vram: int, count: int, ns: str, priority: int | None, pool: str,
                times: int) -> None:
        for _ in range(times):
            request = Resources(milli_tflops=tflops, vram_bytes=vram)
            spec = AllocationSpec(allocation_id=f"{uid}-{self.n}", namespace=ns, pod=uid, pool=pool,
                                  request=request, limit=request, gpu_count=count, priority=priority)
            self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(pick=st.integers(min_value=0, max_value=10**6), queued=st.sampled_from([False, False, False, True]),
          seconds=st.sampled_from([0, 0, 60, 900]))
    def release(self, pick: int, queued: bool, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        live = sorted(a for a, s in self.grouped.allocations.items() if (s.status == QUEUED) == queued)
        if live:
            self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=live[pick % len(live)]))

    @rule(uid=st.sampled_from(UIDS), ns=st.sampled_from(["a", "b", "c"]), priority=st.sampled_from([None, 500]),
          times=st.integers(1, 3))
    def small(self, uid: str, ns: str, priority: int | None, times: int) -> None:
        """Requests of a few common groups (so groups have several members)."""
        self.request(uid, 40_000, Gi, 1, ns, priority, "p", times)

    @rule(what=st.sampled_from(["weight", "namespaces", "capacity"]), weight=st.integers(1, 4),
          name=st.sampled_from(["sa", "sb"]), tflops=st.sampled_from([100, 200]), node=st.sampled_from(["n0", "n1"]))
    def churn(self, what: str, weight: int, name: str, tflops: int, node: str) -> None:
        """A share's weight or namespaces change (ns c joins or leaves sa), or a node re-reports its
        GPUs' capacity (the pool's capacity, hence every rank, changes)."""
        if what == "capacity":
            gpus = tuple(a_gpu(f"{node}-g{i}", tflops, 16 * Gi, index=i) for i in range(2))
            self._send(it.RegisterNode(intent_id=self._id(), node=node, pool="p", gpus=gpus))
            return
        spec = self.grouped.shares[name]
        if what == "weight":
            spec = msgspec.structs.replace(spec, weight=weight)
        elif name == "sa":
            spec = msgspec.structs.replace(spec, namespaces=("a",) if "c" in spec.namespaces else ("a", "c"))
        self._send(it.SetShare(intent_id=self._id(), name=name, spec=spec))

    @invariant()
    def the_order_is_the_brute_force_sort(self) -> None:
        assert fairshare.waiting(self.grouped) == brute_order(self.grouped)
        reference = ReferenceScheduler()
        for pool, share in (("p", "sa"), ("p", "sb"), ("p", "dept"), ("p", ""), ("q", None)):
            assert self.g_sched.rank(self.grouped, pool, share) == reference.rank(self.grouped, pool, share)
        assert fairshare.waiting(self.grouped, lambda pool, share: self.g_sched.rank(self.grouped, pool, share)) \
            == fairshare.waiting(self.grouped)

    @invariant()
    def replay_and_snapshot_equal_live(self) -> None:
        fresh = ClusterState.empty()
        for event in self.events:
            evolve(fresh, event)
        twin = decode_snapshot(encode_snapshot(self.grouped))
        assert digest(fresh) == digest(self.grouped) == digest(twin) == digest(self.walked)
        assert fresh.decayed == self.grouped.decayed == twin.decayed


FairDrainEquivalence.TestCase.settings = settings(max_examples=50, stateful_step_count=50, deadline=None,
                                                  suppress_health_check=[HealthCheck.too_slow])
TestFairDrainEquivalence = FairDrainEquivalence.TestCase


def test_a_share_whose_grant_lifts_its_rank_yields_its_other_requests_place_at_once() -> None:
    """a1 and a2 are of different request groups; after a1's grant a ranks above b, so b1 (queued
    after a2) goes before a2 in the same drain (a2's place in the merge is taken again)."""
    c = two_shares(gpus=4)
    c.request(a_request("big", 100, Gi, pool="p", ns="c", count=4))
    c.request(a_request("a1", 100, Gi, pool="p", ns="a"))
    c.request(a_request("a2", 60, Gi, pool="p", ns="a"))
    c.request(a_request("b1", 100, Gi, pool="p", ns="b"))
    assert granted_ids(c.release("big")) == ["a1", "b1", "a2"]


def test_a_passed_group_resumes_after_what_the_walk_reached_under_the_share_order() -> None:
    """x1 and x2 (share sa, no usage) rank before p (share sb, holding the victim) though p arrived
    between them. x1 finds nothing and its group is passed (x2 with it); p then preempts the
    two-GPU victim and takes one GPU: x2 was reached before p, so it is not tried again in this
    drain (the request-by-request walk agrees; process's next drain may)."""
    c = Cluster()
    c.pool("p", preemption="namespace")
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi, index=0), a_gpu("n0-g1", 100, 16 * Gi, index=1))
    c.node("n1", "p", a_gpu("n1-g0", 30, 16 * Gi, index=0))
    c.share("sa", a_share("a", pool="p"))
    c.share("sb", a_share("b", pool="p"))
    victim = a_request("v", 60, Gi, pool="p", ns="b", count=2, attributes={PROTECTION_KEY: "30m"})
    assert isinstance(c.request(victim), ev.AllocationGranted)
    assert isinstance(c.request(a_request("r", 30, Gi, pool="p", ns="c", priority=10)), ev.AllocationGranted)
    for uid, ns, tflops in (("x1", "a", 50), ("p", "b", 100), ("x2", "a", 50)):
        assert isinstance(c.request(a_request(uid, tflops, Gi, pool="p", ns=ns, priority=5)), ev.AllocationQueued)
    assert fairshare.waiting(c.state) == ["x1", "x2", "p"]
    c.tick(3600)  # the victim's protection is over
    drained = _drained_like_the_walk(c, "r")
    assert granted_ids(drained) == ["p"] and c.state.allocations["x2"].status == QUEUED


def test_a_preemption_that_lowers_a_shares_rank_moves_its_waiting_requests_up_in_the_same_drain() -> None:
    """sv and sb each hold 2 of 4 big GPUs (a tie: b-w, queued first, is ahead of v-w). In one drain
    a-hi (priority 500) preempts one of sv's allocations and takes half its GPU: sv now ranks below
    sb, so v-w gets the half left, not b-w."""
    c = Cluster()
    c.pool("p", preemption="pool")
    c.node("n0", "p", *(a_gpu(f"n0-g{i}", 100, 16 * Gi, index=i) for i in range(4)))
    c.node("n1", "p", a_gpu("n1-g0", 30, 16 * Gi, index=0))
    for name, ns in (("sa", "a"), ("sb", "b"), ("sv", "v")):
        c.share(name, a_share(ns, pool="p"))
    protected = {PROTECTION_KEY: "30m"}
    for uid, ns, priority in (("v1", "v", None), ("v2", "v", None), ("b1", "b", 100), ("b2", "b", 100)):
        assert isinstance(c.request(a_request(uid, 100, Gi, pool="p", ns=ns, priority=priority, attributes=protected)),
                          ev.AllocationGranted)
    assert isinstance(c.request(a_request("r", 30, Gi, pool="p", ns="c", priority=10)), ev.AllocationGranted)
    for uid, ns, priority in (("b-w", "b", None), ("v-w", "v", None), ("a-hi", "a", 500)):
        assert isinstance(c.request(a_request(uid, 50, Gi, pool="p", ns=ns, priority=priority)), ev.AllocationQueued)
    assert fairshare.waiting(c.state) == ["a-hi", "b-w", "v-w"]
    c.tick(3600)  # the protection is over
    drained = _drained_like_the_walk(c, "r")
    assert [e.allocation_id for e in drained if isinstance(e, ev.AllocationPreempted)] in (["v1"], ["v2"])
    assert granted_ids(drained) == ["a-hi", "v-w"]


NO_SHARES_DIGEST = "ae46ef9ca0a0db27247785828825066fa6778d23c1e2f008522ca51594807eed"
"""The digest of the scenario's events computed on the code before shares existed (c7fd4f7)."""


def scenario_digest(*, share_elsewhere: bool, seed: int = 30, steps: int = 400) -> tuple[str, Counter[str]]:
    """sha256 of every event (but a ShareSet) of a seeded run over pools p and q without shares, and
    the count of each event type; ``share_elsewhere``: a share in pool s first (p, q unchanged)."""
    kinds: Counter[str] = Counter()
    rng = random.Random(seed)
    state, scheduler = ClusterState.empty(), Scheduler()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    digest = hashlib.sha256()
    n = 0

    def send(intent: it.AnyIntent) -> None:
        for event in process(state, intent, now, scheduler):
            if not isinstance(event, ev.ShareSet):
                digest.update(codec.encode(event))
                kinds[type(event).__name__] += 1

    if share_elsewhere:
        send(it.SetShare(intent_id="share", name="elsewhere", spec=a_share("x", pool="s")))
    for pool, preemption in (("p", "pool"), ("q", "namespace")):
        n += 1
        send(it.ConfigurePool(intent_id=f"i{n}", pool=pool, config=PoolConfig(preemption=preemption)))
        for k in range(3):
            n += 1
            gpus = tuple(a_gpu(f"{pool}{k}-g{i}", rng.choice([100, 200]), 16 * Gi, index=i) for i in range(2))
            send(it.RegisterNode(intent_id=f"i{n}", node=f"{pool}{k}", pool=pool, gpus=gpus))
    for _ in range(steps):
        n += 1
        now += timedelta(seconds=rng.choice([0, 1, 30]))
        roll = rng.random()
        live = sorted(state.allocations)
        if roll < 0.55:
            tflops = rng.choice([20_000, 40_000, 50_000, 100_000])
            request = Resources(milli_tflops=tflops, vram_bytes=rng.choice([Gi, 4 * Gi]))
            spec = AllocationSpec(allocation_id=f"a{n}", namespace=rng.choice(["x", "y", "z"]), pod=f"a{n}",
                                  pool=rng.choice(["p", "q"]), request=request, limit=request,
                                  gpu_count=rng.choice([1, 1, 2]), priority=rng.choice([None, None, 5, 500]),
                                  qos=rng.choice(["low", "medium", "high"]))
            send(it.RequestAllocation(intent_id=f"i{n}", spec=spec))
        elif roll < 0.9 and live:
            send(it.ReleaseAllocation(intent_id=f"i{n}", allocation_id=rng.choice(live)))
        else:
            amount = QuotaAmount(milli_tflops=rng.choice([100_000, 400_000]))
            send(it.SetQuota(intent_id=f"i{n}", namespace=rng.choice(["x", "y"]),
                             spec=QuotaSpec(total_requests=amount)))
    return digest.hexdigest(), kinds



def test_pools_without_shares_decide_exactly_the_events_they_did_before_shares_existed() -> None:
    plain, kinds = scenario_digest(share_elsewhere=False)
    assert kinds["AllocationGranted"] > 150 and kinds["AllocationPreempted"] > 5 and kinds["AllocationQueued"] > 50
    assert plain == NO_SHARES_DIGEST
    # a share in another pool turns the ranked drain on: the events of p and q stay the same
    assert scenario_digest(share_elsewhere=True)[0] == NO_SHARES_DIGEST


def test_the_queue_and_why_say_which_share_is_ahead_and_by_how_much() -> None:
    c = two_shares(weight_a=2, gpus=4)
    c.request(a_request("a-held", 100, 12 * Gi, pool="p", ns="a", count=3))  # a: 0.75 of GPUs, TFLOPS
    c.request(a_request("b-held", 10, 16 * Gi, pool="p", ns="b"))  # b: 0.25 of VRAM and of GPUs (VRAM named)
    for uid, ns in (("a1", "a"), ("b1", "b"), ("c1", "c")):
        assert isinstance(c.request(a_request(uid, 100, Gi, pool="p", ns=ns)), ev.AllocationQueued)
    assert [a.spec.allocation_id for a in reasons.queued(c.state)] == ["b1", "a1", "c1"]
    assert reasons.queued(c.state, reasons.explainer()) == reasons.queued(c.state)
    a1 = c.state.allocations["a1"]
    standing = reasons.fair_standing(c.state, a1)
    assert standing is not None and standing.ahead is not None and standing.mine is not None
    assert (standing.share, standing.ahead.share, standing.shares_ahead) == ("sa", "sb", 1)
    assert standing.text == ("share sb is ahead: dominant share 0.25 (VRAM) vs yours 0.75 (TFLOPS), "
                             "weight 1 vs 2")
    first = reasons.fair_standing(c.state, c.state.allocations["b1"])
    assert first is not None and first.ahead is None
    assert first.text == "share sb is first among the 2 shares waiting at this priority: dominant share 0.25 " \
                         "(VRAM), weight 1"
    last = reasons.fair_standing(c.state, c.state.allocations["c1"])
    assert last is not None and last.shares_ahead == 2 and last.mine is None
    assert last.text.startswith("share sb is ahead (2 shares ahead): namespace c is in no share")
    why = documents.explanation(c.state, a1, reasons.current(c.state, a1.spec))
    assert why["fair_share"]["text"] == standing.text
    assert why["fair_share"]["ahead"] == {"share": "sb", "dominant_share": 0.25, "resource": "VRAM",
                                          "weight": 1, "weighted": 0.25}
    entry = documents.queue_entry(a1, 1, reasons.current(c.state, a1.spec), standing)
    assert entry["fair_share"]["mine"]["weighted"] == 0.375


def test_a_pool_without_shares_says_nothing_of_shares() -> None:
    c = Cluster()
    c.node("n", "q", a_gpu("g", 100, 16 * Gi))
    c.request(a_request("hold", 100, Gi, pool="q", ns="a"))
    c.request(a_request("w", 100, Gi, pool="q", ns="a"))
    waiting = c.state.allocations["w"]
    assert reasons.fair_standing(c.state, waiting) is None
    assert "fair_share" not in documents.explanation(c.state, waiting, reasons.current(c.state, waiting.spec))


def test_decayed_usage_never_runs_back_and_goes_with_the_half_life_or_the_shares() -> None:
    c = two_shares(half_life_s=600, gpus=2)
    c.request(a_request("a1", 100, Gi, pool="p", ns="a"))
    c.tick(600)
    c.request(a_request("a2", 100, Gi, pool="p", ns="a"))
    kept = c.state.decayed["p"]
    assert kept.at == c.now and abs(kept.shares["sa"].gpus - 0.5) < 1e-12  # 1 GPU held for one half-life
    c.tick(-300)  # an event stamped earlier (another writer's clock) decays nothing
    c.release("a2")
    assert kept.at == T0 + timedelta(seconds=600) and abs(kept.shares["sa"].gpus - 0.5) < 1e-12
    c.tick(600)
    c.pool("p", preemption="off", fair_share_half_life_s=0)  # decay off: nothing kept, current usage only
    assert "p" not in c.state.decayed
    c.pool("p", preemption="off", fair_share_half_life_s=600)
    c.request(a_request("a3", 100, Gi, pool="p", ns="a"))
    assert c.state.decayed["p"].shares == {}  # starts afresh at the first usage event
    c.tick(60)
    c.release("a3")
    assert set(c.state.decayed["p"].shares) == {"sa"}
    c.remove_share("sa")
    c.remove_share("sb")  # the pool has no shares any more: its decayed usage goes
    assert not c.state.decayed
    assert c.replayed_digest() == digest(c.state)


def _drained_like_the_walk(c: Cluster, released: str) -> list[ev.AnyEvent]:
    """Release ``released`` on the cluster and on a replayed copy, drain the first with the
    drain and the second with the plain fair walk; the two must emit the same events (returned)."""
    walked = ClusterState.empty()
    for event in c.events:
        evolve(walked, event)
    release = it.ReleaseAllocation(intent_id=f"release-{released}", allocation_id=released)
    drains = []
    for state, drain, scheduler in ((c.state, process_module.drain, c.scheduler), (walked, fair_walk, Scheduler())):
        out = decide(state, release, c.now, scheduler)
        for event in out:
            evolve(state, event)
        drains.append(drain(state, hints_of(state, out), c.now, scheduler))
    assert drains[0] == drains[1]
    return drains[0]
