"""Gang invariants over random intent sequences (hypothesis state machine).

Two clusters get the same intents, one decided by the Scheduler and one by the ReferenceScheduler:
they must emit identical events. Invariants: a gang is never partially placed (the decision that
first grants members of an unplaced gang grants at least its quorum, with a GangPlaced; a gang
not placed holds nothing, also where its quorum reclaims borrowed work in a pool with shares); GPU
and namespace usage equal the sums of live charges; ``decide``
alone leaves the state untouched; folding the emitted events from empty state, and restoring a
snapshot, reproduce the state and its gang members.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from events import decisions as ev
from events import intents as it
from events.values import GangSpec
from services.allocator.domain import ClusterState, decide, decode_snapshot, digest, encode_snapshot, evolve
from services.allocator.domain.model import GRANTED
from services.allocator.domain.reference import ReferenceScheduler
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request, a_share

GANGS = {
    "g1": GangSpec(key="ns/g1", quorum=2, desired=3),
    "g2": GangSpec(key="ns/g2", quorum=3, desired=4, timeout_s=30),
    "g3": GangSpec(key="ns/g3", quorum=2, desired=2, timeout_s=10),
}
UIDS = tuple(f"u{i}" for i in range(16))


def members_of(state: ClusterState) -> dict[str, tuple[list[str], list[str]]]:
    return {key: (list(m.queued), sorted(m.granted)) for key, m in state.gangs}


class GangMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fast = Cluster()
        self.ref = Cluster(ReferenceScheduler())
        self.n = 0

    def _send(self, intent: it.AnyIntent) -> None:
        state = self.fast.state
        before, seq = digest(state), state.changes.seq
        formed_before = {key for key, m in state.gangs if m.formed}
        alone = decide(state, intent, self.fast.now, self.fast.scheduler)
        assert digest(state) == before and state.changes.seq == seq, "decide mutated the state"
        got = self.fast.send(intent)
        assert got == self.ref.send(intent)
        assert got[: len(alone)] == alone
        self._whole_quorums(got, formed_before)

    def _whole_quorums(self, events: list[ev.AnyEvent], formed_before: set[str]) -> None:
        granted: Counter[str] = Counter()
        placed = {e.key: e.placed for e in events if isinstance(e, ev.GangPlaced)}
        for e in events:
            if isinstance(e, ev.AllocationGranted) and e.spec.gang is not None:
                granted[e.spec.gang.key] += 1
        for key, count in granted.items():
            if key in formed_before:
                continue
            quorum = next(g.quorum for g in GANGS.values() if g.key == key)
            # the GangPlaced counts the quorum and the members beyond it placed with it; the same
            # intent's queue drain may then grant more members as ordinary requests
            assert quorum <= placed.get(key, 0) <= count, (key, count, placed)

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @initialize(sizes=st.lists(st.integers(1, 4), min_size=2, max_size=4))
    def nodes(self, sizes: list[int]) -> None:
        for n, size in enumerate(sizes):
            gpus = tuple(a_gpu(f"n{n}-g{g}", 100, 16 * Gi) for g in range(size))
            self._send(it.RegisterNode(intent_id=self._id(), node=f"n{n}", pool="p", gpus=gpus))

    @rule(uid=st.sampled_from(UIDS), gang=st.sampled_from(sorted(GANGS)), count=st.integers(1, 2),
          tflops=st.sampled_from([40, 100]), qos=st.sampled_from(["low", "medium", "critical"]))
    def member(self, uid: str, gang: str, count: int, tflops: int, qos: str) -> None:
        spec = a_request(uid, tflops, 4 * Gi, count=count, pool="p", ns="ns", gang=GANGS[gang], qos=qos)
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS), tflops=st.sampled_from([30, 100]), qos=st.sampled_from(["low", "high"]),
          ns=st.sampled_from(["ns", "other"]))
    def single(self, uid: str, tflops: int, qos: str, ns: str) -> None:
        spec = a_request(uid, tflops, 4 * Gi, pool="p", ns=ns, qos=qos)
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uids=st.lists(st.sampled_from(UIDS), min_size=1, max_size=6, unique=True))
    def borrow(self, uids: list[str]) -> None:
        """Whole-GPU work of the other namespace, beyond its guarantee once shares are set."""
        for uid in uids:
            self._send(it.RequestAllocation(intent_id=self._id(), spec=a_request(uid, 100, 4 * Gi, pool="p",
                                                                                 ns="other", qos="critical")))

    @initialize(gangs=st.integers(0, 4), others=st.integers(0, 2), shared=st.booleans())
    def first_shares(self, gangs: int, others: int, shared: bool) -> None:
        if shared:
            self.shares(gangs, others)

    @rule(gangs=st.integers(0, 4), others=st.integers(0, 2))
    def shares(self, gangs: int, others: int) -> None:
        """Shares in the pool (guarantees in whole GPUs): the gangs' namespace may then reclaim
        what the other one borrowed, a quorum at a time."""
        self._send(it.SetShare(intent_id=self._id(), name="gangs", spec=a_share("ns", pool="p", gpus=gangs)))
        self._send(it.SetShare(intent_id=self._id(), name="others", spec=a_share("other", pool="p", gpus=others)))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))

    @rule(seconds=st.sampled_from([5, 20]))
    def tick(self, seconds: int) -> None:
        self.fast.tick(seconds)
        self.ref.tick(seconds)
        self._send(it.CheckHeartbeats(intent_id=self._id()))

    @rule(tflops=st.sampled_from([200, 400, 1000]))
    def quota(self, tflops: int) -> None:
        self._send(it.SetQuota(intent_id=self._id(), namespace="ns", spec=a_quota(req=(tflops, 1000 * Gi))))

    @invariant()
    def an_unplaced_gang_holds_nothing(self) -> None:
        state = self.fast.state
        for _key, m in state.gangs:
            for aid in m.queued:
                assert state.allocations[aid].status != GRANTED
            for aid in m.granted:
                assert state.allocations[aid].status == GRANTED

    @invariant()
    def usage_is_the_sum_of_live_charges(self) -> None:
        state = self.fast.state
        for gpu in state.gpus.values():
            assert gpu.used_milli_tflops == sum(c.milli_tflops for c in gpu.charges.values())
            assert gpu.used_vram_bytes == sum(c.vram_bytes for c in gpu.charges.values())
        per_ns: dict[str, int] = defaultdict(int)
        for a in state.allocations.values():
            if a.status == GRANTED and a.usage is not None:
                per_ns[a.spec.namespace] += a.usage.requests_milli_tflops
        assert {ns: u.requests_milli_tflops for ns, u in state.usage.items()} == {
            ns: v for ns, v in per_ns.items() if v or ns in state.usage}

    @invariant()
    def replay_and_snapshot_equal_live(self) -> None:
        state = self.fast.state
        fresh = ClusterState.empty()
        for event in self.fast.events:
            evolve(fresh, event)
        assert digest(fresh) == digest(state)
        assert members_of(fresh) == members_of(state)
        assert members_of(decode_snapshot(encode_snapshot(state))) == members_of(state)


GangMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
test_gang_machine = GangMachine.TestCase
