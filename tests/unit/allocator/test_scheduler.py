"""The optimised Scheduler against the naive ReferenceScheduler, and decide's purity (hypothesis).

Two states receive the same random intents: one decided by a long-lived Scheduler (node index,
free-class pruning, memos, rank caches refreshed from what evolve touched), one by the
ReferenceScheduler (every node, every filter, nothing kept). They must emit identical events
for every strategy. Before each intent, ``decide`` runs alone on the optimised side and must
leave the state's digest and evolve's change report untouched.
"""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from events import intents as it
from events.values import (
    AllocationSpec,
    GpuSpec,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PoolConfig,
    PreferredSchedulingTerm,
    Resources,
)
from services.allocator.domain import decide, digest, profile
from services.allocator.domain.reference import ReferenceScheduler
from tests.unit.allocator.builders import Cluster, Gi, a_gpu

NODES = ("n1", "n2", "n3", "n4", "n5")
UIDS = tuple(f"u{i}" for i in range(24))
POOLS = ("a", "b")
MIG_MODEL = "A100_SXM_80G"
"""A model with MIG templates: partitioned requests (with and without a named template) go to it."""


def _term(zone: str) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(key="zone", operator="In", values=(zone,)),))


affinities = st.sampled_from([
    None,
    None,
    None,
    NodeAffinity(required=(_term("x"),)),
    NodeAffinity(preferred=(PreferredSchedulingTerm(weight=10, preference=_term("y")),)),
])


@st.composite
def requests(draw: st.DrawFn) -> Resources:
    if draw(st.booleans()):
        return Resources(compute_milli_percent=draw(st.sampled_from([5_000, 25_000, 47_000, 50_000, 100_000])),
                         vram_bytes=draw(st.sampled_from([0, Gi, 8 * Gi])))
    return Resources(milli_tflops=draw(st.sampled_from([0, 10_000, 25_000, 50_000, 100_000])),
                     vram_bytes=draw(st.sampled_from([0, Gi, 4 * Gi, 16 * Gi])))


def _topology(gpu: GpuSpec, i: int, kind: int) -> GpuSpec:
    """Kind 0: no topology data; 1: NUMA by index parity; 2: plus an NVLink pair; 3: soft/shared-only capabilities."""
    if kind == 0:
        return gpu
    group = f"nv{i // 2}" if kind == 2 and i < 2 else ""
    caps = ("shared", "soft") if kind == 3 and i == 0 else ()
    return msgspec.structs.replace(gpu, numa_node=i % 2, interconnect_group=group,
                                   isolation_capabilities=caps)  # type: ignore[arg-type]


class SchedulerEquivalence(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fast = Cluster()
        self.ref = Cluster(ReferenceScheduler())
        self.n = 0
        self.shapes: list[AllocationSpec] = []

    def _send(self, intent: it.AnyIntent) -> None:
        state = self.fast.state
        before, seq = digest(state), state.changes.seq
        alone = decide(state, intent, self.fast.now, self.fast.scheduler)
        assert digest(state) == before and state.changes.seq == seq, "decide mutated the state"
        got = self.fast.send(intent)
        want = self.ref.send(intent)
        assert got == want
        assert got[: len(alone)] == alone

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    @initialize(placement=st.sampled_from(sorted(profile.STRATEGIES)), sizes=st.lists(st.integers(1, 4), min_size=4,
                                                                                    max_size=4))
    def start(self, placement: str, sizes: list[int]) -> None:
        for pool in POOLS:
            self._send(it.ConfigurePool(intent_id=self._id(), pool=pool, config=PoolConfig(placement=placement)))
        for k, (node, n) in enumerate(zip(NODES, sizes, strict=False)):
            model = MIG_MODEL if k in (1, 2) else "A100"
            gpus = tuple(a_gpu(f"{node}-g{i}", 100, 40 * Gi, index=i, model=model) for i in range(n))
            self._send(it.RegisterNode(intent_id=self._id(), node=node, pool=POOLS[k % 2], gpus=gpus,
                                       labels={"zone": "xy"[k % 2]}, cpu_milli=32_000, memory_bytes=64 * Gi))

    @rule(node=st.sampled_from(NODES), pool=st.sampled_from(POOLS), n=st.integers(1, 3),
          tf_cap=st.sampled_from([50, 100]), gi=st.sampled_from([16, 40, 80]),
          model=st.sampled_from(["A100", "T4", MIG_MODEL, MIG_MODEL]),
          phase=st.sampled_from(["Running", "Running", "Pending"]), mode=st.sampled_from(["", "", "hard"]),
          zone=st.sampled_from(["x", "y"]), cpu=st.sampled_from([0, 8000, 32_000]), ready=st.booleans(),
          topo=st.integers(0, 3))
    def register(self, node: str, pool: str, n: int, tf_cap: int, gi: int, model: str, phase: str, mode: str,
                 zone: str, cpu: int, ready: bool, topo: int) -> None:
        gpus = tuple(_topology(a_gpu(f"{node}-g{i}", tf_cap, gi * Gi, index=i, model=model,
                                     phase=phase if i == 0 else "Running", mode=mode), i, topo) for i in range(n))
        self._send(it.RegisterNode(intent_id=self._id(), node=node, pool=pool, gpus=gpus, labels={"zone": zone},
                                   cpu_milli=cpu, memory_bytes=64 * Gi if cpu else 0, schedulable=ready or n > 1))

    @rule(uid=st.sampled_from(UIDS), pool=st.sampled_from(POOLS), request=requests(), count=st.integers(1, 2),
          isolation=st.sampled_from(["soft"] * 4 + ["hard", "shared", "partitioned", "partitioned"]),
          template=st.sampled_from(["", "", "1g.10gb", "3g.40gb", "mig-2g-20gb", "7g.80gb"]),
          models=st.sampled_from([()] * 4 + [("T4",)]), indices=st.sampled_from([()] * 6 + [(0,), (1, 2)]),
          affinity=affinities, cpu=st.sampled_from([0, 0, 4000, 16_000]),
          memory=st.sampled_from([0, 0, 8 * Gi, 40 * Gi]),
          qos=st.sampled_from(["medium", "medium", "low", "high", "critical"]), ns=st.sampled_from(["ns", "other"]),
          protect=st.sampled_from(["", "", "1h"]))
    def request(self, uid: str, pool: str, request: Resources, count: int, isolation: str, template: str,
                models: tuple[str, ...], indices: tuple[int, ...], affinity: NodeAffinity | None, cpu: int,
                memory: int, qos: str, ns: str, protect: str) -> None:
        """Requests of every QoS (so preemption decides too), some under eviction protection, some
        partitioned (with or without a named template)."""
        attributes = {"tensor-fusion.ai/eviction-protection": protect} if protect else {}
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool=pool, request=request, limit=request,
                              gpu_count=count, isolation=isolation, gpu_models=models, gpu_indices=indices,
                              node_affinity=affinity, cpu_milli=cpu, memory_bytes=memory, qos=qos,
                              attributes=attributes,
                              partition_template=template if isolation == "partitioned" else "")
        self.shapes.append(spec)
        self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS), back=st.integers(1, 3))
    def same_shape_again(self, uid: str, back: int) -> None:
        """A request shaped like an earlier one: exercises the per-shape memos and rank caches."""
        if len(self.shapes) >= back:
            spec = msgspec.structs.replace(self.shapes[-back], allocation_id=uid, pod=uid)
            self._send(it.RequestAllocation(intent_id=self._id(), spec=spec))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self._send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))

    @rule(uid=st.sampled_from(UIDS), request=requests())
    def resize(self, uid: str, request: Resources) -> None:
        self._send(it.ResizeAllocation(intent_id=self._id(), allocation_id=uid, request=request, limit=request))

    @rule(node=st.sampled_from(NODES))
    def remove(self, node: str) -> None:
        self._send(it.RemoveNode(intent_id=self._id(), node=node))

    @rule(pool=st.sampled_from(POOLS), placement=st.sampled_from(sorted(profile.STRATEGIES)),
          workers=st.sampled_from([0, 0, 1, 2]), preemption=st.sampled_from(["cluster", "namespace", "off"]),
          policy=st.sampled_from(["static", "dynamic"]), topology=st.sampled_from(["soft", "hard", "off"]),
          tier=st.integers(0, 3))
    def configure(self, pool: str, placement: str, workers: int, preemption: str, policy: str, topology: str,
                  tier: int) -> None:
        config = PoolConfig(placement=placement, max_workers_per_node=workers, preemption=preemption,
                            isolation_policy=policy, topology=topology, max_topology_tier=tier)
        self._send(it.ConfigurePool(intent_id=self._id(), pool=pool, config=config))


SchedulerEquivalence.TestCase.settings = settings(
    max_examples=120, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestSchedulerEquivalence = SchedulerEquivalence.TestCase
