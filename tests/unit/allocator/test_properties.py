"""Property tests over random intent sequences (hypothesis state machine).

Invariants: GPU usage equals the sum of live charges and never exceeds capacity unless capacity
shrank under it; a grant never lands on a GPU without room; namespace usage equals the sum over
its live allocations; a release restores exactly; folding the emitted events from empty state
reproduces the state; a state restored from a snapshot decides exactly like the live one.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from events import decisions as ev
from events import intents as it
from events.values import PLACEMENT_STRATEGIES, AllocationSpec, PoolConfig, QuotaAmount, QuotaSpec, Resources
from services.allocator.domain import ClusterState, decode_snapshot, digest, encode_snapshot, evolve, process
from services.allocator.domain.model import GRANTED
from tests.unit.allocator.builders import T0, Cluster, Gi, a_gpu

NODES = ("n1", "n2", "n3", "n4")
UIDS = tuple(f"u{i}" for i in range(12))
amounts = st.sampled_from([0, 500, 10_000, 25_000, 50_000, 100_000])
vrams = st.sampled_from([0, Gi, 4 * Gi, 8 * Gi, 16 * Gi])


@st.composite
def resources(draw: st.DrawFn) -> Resources:
    if draw(st.booleans()):
        return Resources(compute_milli_percent=draw(st.sampled_from([5_000, 25_000, 50_000, 100_000])),
                         vram_bytes=draw(vrams))
    return Resources(milli_tflops=draw(amounts), vram_bytes=draw(vrams))


class AllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster()
        self.shrunk: set[str] = set()
        self.n = 0

    def _send(self, intent: it.AnyIntent) -> list[ev.AnyEvent]:
        out = self.c.send(intent)
        for e in out:
            if isinstance(e, ev.AllocationGranted):
                for name in e.gpus:
                    gpu = self.c.state.gpus[name]
                    assert gpu.used_milli_tflops <= gpu.spec.capacity.milli_tflops
                    assert gpu.used_vram_bytes <= gpu.spec.capacity.vram_bytes
        return out

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @rule(node=st.sampled_from(NODES), pool=st.sampled_from(("a", "b")), n=st.integers(1, 3),
          tf_cap=st.sampled_from([50, 100, 312]), gi=st.sampled_from([16, 40, 80]))
    def register(self, node: str, pool: str, n: int, tf_cap: int, gi: int) -> None:
        gpus = tuple(a_gpu(f"{node}-g{i}", tf_cap, gi * Gi, index=i) for i in range(n))
        for g in gpus:
            old = self.c.state.gpus.get(g.name)
            if old and old.charges and (g.capacity.milli_tflops < old.used_milli_tflops
                                        or g.capacity.vram_bytes < old.used_vram_bytes):
                self.shrunk.add(g.name)
        self._send(it.RegisterNode(intent_id=self._id(), node=node, pool=pool, gpus=gpus))

    @rule(uid=st.sampled_from(UIDS), pool=st.sampled_from(("a", "b")), ns=st.sampled_from(("x", "y")),
          request=resources(), count=st.integers(1, 3), qos=st.sampled_from(("critical", "high", "medium", "low")),
          shared=st.booleans())
    def request(self, uid: str, pool: str, ns: str, request: Resources, count: int, qos: str, shared: bool) -> None:
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool=pool, request=request, limit=request,
                              gpu_count=count, qos=qos, isolation="shared" if shared else "soft")
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        before = {name: g.used_milli_tflops for name, g in self.c.state.gpus.items()}
        held = {a: (s.gpus, s.charges) for a, s in self.c.state.allocations.items()}
        allocation = self.c.state.allocations.get(uid)
        out = self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))
        if allocation is None or allocation.status != GRANTED:
            return
        expected = Counter(before)
        for name, charge in zip(allocation.gpus, allocation.charges, strict=True):
            expected[name] -= charge.milli_tflops
        for e in out[1:]:  # the drain: grants, and preemptions by queued requests of higher priority
            if isinstance(e, ev.AllocationPreempted):
                for name, charge in zip(*held[e.allocation_id], strict=True):
                    expected[name] -= charge.milli_tflops
                continue
            assert isinstance(e, ev.AllocationGranted)
            held[e.spec.allocation_id] = (list(e.gpus), list(e.charges))
            for name, charge in zip(e.gpus, e.charges, strict=True):
                expected[name] += charge.milli_tflops
        for name in allocation.gpus:
            assert self.c.state.gpus[name].used_milli_tflops == expected[name]

    @rule(uid=st.sampled_from(UIDS), request=resources())
    def resize(self, uid: str, request: Resources) -> None:
        self._send(it.ResizeAllocation(intent_id=self._id(), allocation_id=uid, request=request, limit=request))

    @rule(ns=st.sampled_from(("x", "y")), t=st.sampled_from([None, 0, 50_000, 200_000]),
          workers=st.sampled_from([None, 1, 3]))
    def quota(self, ns: str, t: int | None, workers: int | None) -> None:
        spec = QuotaSpec(total_requests=QuotaAmount(milli_tflops=t), max_workers=workers)
        self._send(it.SetQuota(intent_id=self._id(), namespace=ns, spec=spec))

    @rule(node=st.sampled_from(NODES))
    def remove(self, node: str) -> None:
        self._send(it.RemoveNode(intent_id=self._id(), node=node))

    @rule(pool=st.sampled_from(("a", "b")), placement=st.sampled_from(PLACEMENT_STRATEGIES))
    def configure(self, pool: str, placement: str) -> None:
        self._send(it.ConfigurePool(intent_id=self._id(), pool=pool, config=PoolConfig(placement=placement)))

    @rule(uid=st.sampled_from(UIDS), pool=st.sampled_from(("a", "b")), request=resources())
    def snapshot_twin_decides_the_same(self, uid: str, pool: str, request: Resources) -> None:
        twin = decode_snapshot(encode_snapshot(self.c.state))
        other = ClusterState.empty()  # built incrementally by evolve, like the live state
        for event in self.c.events:
            evolve(other, event)
        assert digest(twin) == digest(self.c.state) == digest(other)
        spec = AllocationSpec(allocation_id=uid + "-twin", namespace="x", pod=uid, pool=pool, request=request,
                              limit=request)
        intent = it.RequestAllocation(intent_id="twin", spec=spec)
        expected = process(twin, intent, T0)
        assert expected == process(other, intent, T0)
        assert digest(twin) == digest(other)

    @invariant()
    def usage_is_the_sum_of_live_charges(self) -> None:
        state = self.c.state
        per_gpu: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for aid, allocation in state.allocations.items():
            if allocation.status != GRANTED:
                assert aid in set(state.queue)
                continue
            for name, charge in zip(allocation.gpus, allocation.charges, strict=True):
                per_gpu[name][0] += charge.milli_tflops
                per_gpu[name][1] += charge.vram_bytes
        for name, gpu in state.gpus.items():
            assert [gpu.used_milli_tflops, gpu.used_vram_bytes] == per_gpu[name]
            assert gpu.used_milli_tflops >= 0 and gpu.used_vram_bytes >= 0
            assert 0 <= gpu.available_milli_tflops <= gpu.spec.capacity.milli_tflops
            if not gpu.charges:
                self.shrunk.discard(name)
            if name not in self.shrunk:
                assert not gpu.overcommitted

    @invariant()
    def namespace_usage_is_the_sum_of_its_allocations(self) -> None:
        state = self.c.state
        sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for allocation in state.allocations.values():
            if allocation.status == GRANTED and allocation.usage is not None:
                row = sums[allocation.spec.namespace]
                row[0] += allocation.usage.requests_milli_tflops
                row[1] += allocation.usage.requests_vram_bytes
                row[2] += 1
        assert set(state.usage) == {ns for ns, row in sums.items() if any(row)}
        for ns, usage in state.usage.items():
            assert [usage.requests_milli_tflops, usage.requests_vram_bytes, usage.workers] == sums[ns]

    @invariant()
    def replay_reproduces_state(self) -> None:
        assert self.c.replayed_digest() == digest(self.c.state)


AllocatorMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestAllocatorProperties = AllocatorMachine.TestCase
