"""Fair-share invariants (hypothesis) over random shares, requests, resizes, releases and time.

After every step:
* the optimised Scheduler decided exactly as the ReferenceScheduler (same events);
* a reclaim took only allocations that were borrowed, of another share, and never left their
  share below its guarantee in a resource it sets;
* no GPU holds more than its capacity, and the pool's usage stays within the pool's capacity;
* usage per share per pool equals a recount from the live allocations, and replay and the
  snapshot equal the live state;
* the guarantee property, exactly as far as it holds with fragmentation: no waiting request fits
  now, and no waiting request whose grant would keep its share within its guarantee has a reclaim
  plan (``reclaim.find``: a node where taking borrowed allocations of other shares, within their
  guarantees, makes it fit). Protections here outlast the run (one that ends is retried by the
  next CheckHeartbeats, which this machine never sends: tests/unit/allocator/test_unblocked.py).
  A share may still wait below its guarantee while borrowed capacity exists elsewhere when no
  single node can be freed for its request (fragmentation), when the borrowed allocations are
  protected, or under the pool's reclaim churn bounds (this machine leaves those at 0, so every
  plan that exists is taken).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from events import decisions as ev
from events import intents as it
from events.values import SHARE_RESOURCES, AllocationSpec, PoolConfig, Resources, ShareAmount, SharePool, ShareSpec
from services.allocator.domain import Scheduler, digest, evolve
from services.allocator.domain.allocate import attempt
from services.allocator.domain.borrowing import guarantee_of
from services.allocator.domain.model import GRANTED, QUEUED
from services.allocator.domain.placement import Grant
from services.allocator.domain.reclaim import ReclaimPlan, find, may_reclaim
from services.allocator.domain.reference import ReferenceScheduler
from services.allocator.domain.shares import ShareIndex, allocation_amount
from services.allocator.domain.state import ClusterState, decode_snapshot, encode_snapshot
from services.allocator.domain.victims import PROTECTION_KEY
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, tf

UIDS = tuple(f"u{i}" for i in range(9))
NAMESPACES = ("a", "b", "c", "z")
"""a, b, c: the namespaces of shares sa, sb, sc; z is in no share."""


def _amount(gpus: int | None, tflops: int | None) -> ShareAmount:
    return ShareAmount(gpus=gpus, milli_tflops=None if tflops is None else tf(tflops))


@st.composite
def share_terms(draw: st.DrawFn) -> SharePool:
    guaranteed = _amount(draw(st.sampled_from([None, 0, 1, 1, 2, 2, 3])), draw(st.sampled_from([None, None, 100, 150])))
    borrow = draw(st.sampled_from([None, None, _amount(1, None), _amount(0, None), _amount(None, 50)]))
    lend = draw(st.sampled_from([None, None, ShareAmount(gpus=0), ShareAmount(gpus=1)]))
    if lend is not None and (guaranteed.gpus or 0) < (lend.gpus or 0):
        lend = None
    return SharePool(pool="p", guaranteed=guaranteed, borrowing_limit=borrow, lending_limit=lend)


class SharesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fast = Cluster()
        self.ref = Cluster(ReferenceScheduler())
        self.n = 0
        self.decided_at = self.fast.now
        """The time of the last decision: the guarantee property holds as of then (time passing is
        no event, so protections and minimum runtimes that ran out since wait for the next one)."""

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    def _send(self, intent: it.AnyIntent) -> list[ev.AnyEvent]:
        copy = decode_snapshot(encode_snapshot(self.fast.state))
        out = self.fast.send(intent)
        assert out == self.ref.send(intent)
        self.decided_at = self.fast.now
        for event in out:  # folded one by one on a copy: each reclaim checked against the state it saw
            if isinstance(event, ev.AllocationPreempted) and event.reclaim:
                _check_reclaim(copy, event)
            evolve(copy, event)
        return out

    @initialize(nodes=st.lists(st.integers(1, 3), min_size=1, max_size=3), sa=share_terms(), sb=share_terms(),
                sc=share_terms(), nested=st.booleans())
    def start(self, nodes: list[int], sa: SharePool, sb: SharePool, sc: SharePool, nested: bool) -> None:
        self._send(it.ConfigurePool(intent_id=self._id(), pool="p", config=PoolConfig(preemption="cluster")))
        for k, n in enumerate(nodes):
            gpus = tuple(a_gpu(f"n{k}-g{i}", 100, 10 * Gi, index=i) for i in range(n))
            self._send(it.RegisterNode(intent_id=self._id(), node=f"n{k}", pool="p", gpus=gpus))
        parent = ""
        if nested:
            parent = "dept"
            top = ShareAmount(gpus=max(sa.guaranteed.gpus or 0, sb.guaranteed.gpus or 0),
                              milli_tflops=max(sa.guaranteed.milli_tflops or 0, sb.guaranteed.milli_tflops or 0))
            self._send(it.SetShare(intent_id=self._id(), name="dept",
                                   spec=ShareSpec(pools=(SharePool(pool="p", guaranteed=top),))))
        self._send(it.SetShare(intent_id=self._id(), name="sa", spec=ShareSpec(namespaces=("a",), parent=parent,
                                                                                  pools=(sa,))))
        self._send(it.SetShare(intent_id=self._id(), name="sb", spec=ShareSpec(namespaces=("b",), parent=parent,
                                                                                  pools=(sb,))))
        self._send(it.SetShare(intent_id=self._id(), name="sc", spec=ShareSpec(namespaces=("c",), pools=(sc,))))

    @rule(uid=st.sampled_from(UIDS), ns=st.sampled_from(NAMESPACES), tflops=st.sampled_from([20, 50, 100]),
          count=st.integers(1, 2), qos=st.sampled_from(["low", "medium", "high"]),
          protect=st.sampled_from(["", "", "", "1000h"]), whole=st.sampled_from([False, False, True]))
    def request(self, uid: str, ns: str, tflops: int, count: int, qos: str, protect: str, whole: bool) -> None:
        request = Resources(milli_tflops=tf(tflops), vram_bytes=tflops // 10 * Gi)
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=request, limit=request,
                              gpu_count=count, qos=qos, isolation="shared" if whole else "soft",
                              attributes={PROTECTION_KEY: protect} if protect else {})
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS), ns=st.sampled_from(NAMESPACES), qos=st.sampled_from(["low", "high"]))
    def request_a_whole_gpu(self, uid: str, ns: str, qos: str) -> None:
        """Whole GPUs fill pools fast: borrowing, then reclaim, happen in most runs."""
        request = Resources(milli_tflops=tf(100), vram_bytes=10 * Gi)
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=request, limit=request,
                              qos=qos)
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))

    @rule(uid=st.sampled_from(UIDS), tflops=st.sampled_from([10, 30, 60]))
    def resize(self, uid: str, tflops: int) -> None:
        request = Resources(milli_tflops=tf(tflops), vram_bytes=Gi)
        self._send(it.ResizeAllocation(intent_id=self._id(), allocation_id=uid, request=request, limit=request))

    @rule(name=st.sampled_from(["sa", "sb", "sc"]), terms=share_terms())
    def change_share(self, name: str, terms: SharePool) -> None:
        spec = self.fast.state.shares.get(name)
        if spec is not None:
            self._send(it.SetShare(intent_id=self._id(), name=name, spec=ShareSpec(
                namespaces=spec.namespaces, parent=spec.parent, pools=(terms,))))

    @rule(minutes=st.sampled_from([1, 11]))
    def tick(self, minutes: int) -> None:
        self.fast.tick(60 * minutes)
        self.ref.tick(60 * minutes)

    @invariant()
    def totals_never_exceed_the_pool(self) -> None:
        state = self.fast.state
        for gpu in state.gpus.values():
            assert not gpu.overcommitted
        total = state.share_index.total.get("p")
        if total is not None:
            capacity = sum(g.spec.capacity.milli_tflops for g in state.gpus.values())
            assert total.milli_tflops <= capacity
            assert total.vram_bytes <= sum(g.spec.capacity.vram_bytes for g in state.gpus.values())

    @invariant()
    def usage_per_share_is_a_recount(self) -> None:
        state = self.fast.state
        fresh = ShareIndex()
        fresh.rebuild(state.shares, state.allocations.values())
        assert fresh.usage == state.share_index.usage and fresh.total == state.share_index.total

    @invariant()
    def replay_and_snapshot_equal_live(self) -> None:
        state = self.fast.state
        assert self.fast.replayed_digest() == digest(state)
        loaded = decode_snapshot(encode_snapshot(state))
        assert digest(loaded) == digest(state) and loaded.share_index.usage == state.share_index.usage
        assert loaded.reclaims == state.reclaims

    @invariant()
    def no_waiting_request_fits_or_has_a_reclaim_plan(self) -> None:
        state, now = self.fast.state, self.decided_at
        for allocation in list(state.allocations.values()):
            if allocation.status != QUEUED:
                continue
            spec = allocation.spec
            assert not isinstance(attempt(state, spec, Scheduler()), Grant), spec.allocation_id
            if may_reclaim(state, spec) is None:
                found = find(state, spec, now, Scheduler())
                assert not isinstance(found, ReclaimPlan), (spec.allocation_id, found)

    @invariant()
    def borrowed_marks_match_the_grants(self) -> None:
        for allocation in self.fast.state.allocations.values():
            if allocation.status == GRANTED and allocation.spec.namespace == "z":
                assert allocation.borrowed and allocation.share == ""


def _check_reclaim(state: ClusterState, event: ev.AllocationPreempted) -> None:
    """The victim was borrowed, of another share than the reclaimer's, and its share keeps its
    guarantee in every set resource the victim takes from."""
    index = state.share_index
    victim = state.allocations[event.allocation_id]
    assert victim.borrowed and PROTECTION_KEY not in victim.spec.attributes, event
    share = index.leaf_of(event.namespace)
    assert share != index.leaf_of(event.preemptor_namespace), event
    if not share:
        return
    taken = allocation_amount(victim)
    guarantee = guarantee_of(index, share, "p")
    used = index.usage_of(share, "p")
    for i, resource in enumerate(SHARE_RESOURCES):
        g = getattr(guarantee, resource)
        if g is not None and taken[i]:
            assert getattr(used, resource) - taken[i] >= g, (share, resource, event)


SharesMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestSharesProperties = SharesMachine.TestCase
