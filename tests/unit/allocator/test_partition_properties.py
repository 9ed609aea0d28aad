"""Partition invariants under random requests and releases (hypothesis, stateful).

After every intent: the partitions of a GPU never overlap and sit at allowed starts with their
template's width; a GPU holding partitions holds nothing else; each partitioned charge is exactly
its template's size and a GPU's usage is the sum of its charges; template counts and the one
``+me`` partition per GPU hold; namespace quota usage is the sum of template sizes; replaying the
log (and decoding a snapshot) gives exactly the live state.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from events import intents as it
from events.values import AllocationSpec, GpuSpec
from services.allocator.domain import digest
from services.allocator.domain.model import GRANTED, GpuState
from services.allocator.domain.state import decode_snapshot, encode_snapshot
from services.partitions.templates import charge, shipped
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, res

TABLE = shipped()
UIDS = tuple(f"u{i}" for i in range(16))
GPUS = (("n1", "A100_SXM_80G", 700, 80), ("n1", "A100_SXM_80G", 700, 80), ("n2", "A30", 165, 24),
        ("n2", "H100_NVL", 835, 94), ("n3", "L4", 120, 24))
TEMPLATES = ("", "", "", "1g.10gb", "1g.10gb+me", "2g.20gb", "3g.40gb", "4g.40gb", "1g.6gb", "2g.12gb+me", "3g.47gb")


def _gpus() -> dict[str, tuple[GpuSpec, ...]]:
    nodes: dict[str, list[GpuSpec]] = {}
    for i, (node, model, tflops, gib) in enumerate(GPUS):
        nodes.setdefault(node, []).append(a_gpu(f"g{i}", tflops, gib * Gi, model=model, index=len(nodes.get(node, []))))
    return {node: tuple(specs) for node, specs in nodes.items()}


def _check_gpu(gpu: GpuState) -> None:
    held = gpu.partitions
    assert sum(c.milli_tflops for c in gpu.charges.values()) == gpu.used_milli_tflops
    assert sum(c.vram_bytes for c in gpu.charges.values()) == gpu.used_vram_bytes
    if not held:
        return
    assert set(held) == set(gpu.charges), "partitions mixed with another isolation mode"
    family = TABLE.family_of(gpu.spec.model)
    assert family is not None
    ranges = sorted((p.start, p.end) for p in held.values())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(ranges)), ranges
    for uid, partition in held.items():
        profile = family.profile(partition.template)
        assert profile is not None and partition.profile_id == profile.nvml_profile_id
        assert partition.start in profile.starts and partition.end == partition.start + profile.memory_slices
        assert gpu.charges[uid] == charge(family, profile, gpu.spec.capacity), "charged other than the template size"
        assert sum(1 for p in held.values() if p.template == profile.name) <= profile.max_instances
    assert sum(1 for p in held.values() if p.template.endswith("+me")) <= 1


class PartitionInvariants(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster()

    @initialize()
    def inventory(self) -> None:
        for node, gpus in _gpus().items():
            self.c.node(node, "p", *gpus)

    @rule(uid=st.sampled_from(UIDS), template=st.sampled_from(TEMPLATES), count=st.sampled_from([1, 1, 1, 2]),
          tflops=st.sampled_from([0, 20, 90, 150, 400]), gb=st.sampled_from([0, 5, 11, 30, 45]),
          ns=st.sampled_from(["a", "b"]))
    def request_partition(self, uid: str, template: str, count: int, tflops: int, gb: int, ns: str) -> None:
        request = res(tflops, gb * 10**9)
        spec = AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=request, limit=request,
                              gpu_count=count, isolation="partitioned", partition_template=template)
        self.c.request(spec)

    @rule(uid=st.sampled_from(UIDS), isolation=st.sampled_from(["soft", "hard", "shared"]),
          tflops=st.sampled_from([10, 50]))
    def request_other(self, uid: str, isolation: str, tflops: int) -> None:
        request = res(tflops, Gi)
        self.c.request(AllocationSpec(allocation_id=uid, namespace="a", pod=uid, pool="p", request=request,
                                      limit=request, isolation=isolation))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self.c.send(it.ReleaseAllocation(intent_id=f"r-{uid}-{len(self.c.events)}", allocation_id=uid))

    @invariant()
    def gpus_hold_valid_partitions(self) -> None:
        for gpu in self.c.state.gpus.values():
            _check_gpu(gpu)

    @invariant()
    def quota_usage_is_the_sum_of_template_sizes(self) -> None:
        want: dict[str, tuple[int, int, int]] = {}
        for allocation in self.c.state.allocations.values():
            if allocation.status != GRANTED:
                continue
            if allocation.spec.isolation == "partitioned":
                assert len(allocation.partitions) == len(allocation.gpus)
            t, v, w = want.get(allocation.spec.namespace, (0, 0, 0))
            assert allocation.usage is not None
            want[allocation.spec.namespace] = (t + allocation.usage.requests_milli_tflops,
                                               v + allocation.usage.requests_vram_bytes, w + 1)
            if allocation.spec.isolation == "partitioned":
                assert allocation.usage.requests_milli_tflops == sum(c.milli_tflops for c in allocation.charges)
                assert allocation.usage.limits_vram_bytes == sum(c.vram_bytes for c in allocation.charges)
        got = {ns: (u.requests_milli_tflops, u.requests_vram_bytes, u.workers) for ns, u in self.c.state.usage.items()}
        assert got == want

    @invariant()
    def replay_and_snapshot_equal_live(self) -> None:
        live = digest(self.c.state)
        assert self.c.replayed_digest() == live
        assert digest(decode_snapshot(encode_snapshot(self.c.state))) == live


PartitionInvariants.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestPartitionInvariants = PartitionInvariants.TestCase
