"""Partitioned (MIG) allocations: template choice, slots, mixing with other modes, release, quota, reasons.

GPUs are A100 SXM 80GB (7 compute slices, 8 memory slots) of 700 TFLOPS, so one compute slice is
100 TFLOPS, and 80 GiB of VRAM (templates count decimal GB: 1g.10gb is 10^10 bytes).
"""

from __future__ import annotations

import msgspec
import pytest

from events import codec
from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GangSpec, Partition, Resources
from services.allocator.api import documents, reasons, views
from services.allocator.domain import digest, evolve
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request, res

GB = 10**9
MIG = "A100_SXM_80G"


def mig_cluster(gpus: int = 1, **spec: object) -> Cluster:
    c = Cluster()
    c.node("n1", "p", *(msgspec.structs.replace(a_gpu(f"g{i}", 700, 80 * Gi, model=MIG, index=i), **spec)
                        for i in range(gpus)))
    return c


def part(uid: str, tflops: float = 0, vram: int = 0, *, template: str = "", count: int = 1) -> AllocationSpec:
    return a_request(uid, tflops, vram, pool="p", count=count, isolation="partitioned", partition_template=template)


def granted(c: Cluster, uid: str, tflops: float = 0, vram: int = 0, *, template: str = "") -> ev.AllocationGranted:
    out = c.request(part(uid, tflops, vram, template=template))
    assert isinstance(out, ev.AllocationGranted), getattr(out, "reason", out)
    return out


def test_least_waste_template_is_charged_at_its_size_not_the_request() -> None:
    c = mig_cluster()
    out = granted(c, "a", 30, 15 * GB)  # 1g.10gb lacks VRAM; 1g.20gb wastes least (2g.20gb has 2x the TFLOPS)
    assert out.partitions == (Partition(template="1g.20gb", profile_id=15, start=6, end=8),)
    assert out.charges == (Resources(milli_tflops=100_000, vram_bytes=20 * GB),)
    assert c.avail("g0") == (600_000, 80 * Gi - 20 * GB)
    assert c.state.gpus["g0"].partitions == {"a": out.partitions[0]}
    assert c.state.allocations["a"].partitions == list(out.partitions)


def test_equal_waste_goes_to_fewer_slots_then_name() -> None:
    out = granted(mig_cluster(), "a")  # 1g.10gb and 1g.10gb+me waste the same: the name decides
    assert out.partitions[0].template == "1g.10gb"


def test_named_template_with_tensorfusion_alias_and_highest_free_start() -> None:
    c = mig_cluster()
    assert granted(c, "a", template="mig-3g-40gb").partitions[0] == Partition(
        template="3g.40gb", profile_id=9, start=4, end=8)
    assert granted(c, "b", template="4g.40gb").partitions[0].start == 0  # the low start stayed free


def test_named_template_too_small_or_unknown_is_rejected_with_the_reason() -> None:
    c = mig_cluster()
    small = c.request(part("a", 200, template="1g.10gb"))
    assert isinstance(small, ev.AllocationRejected) and small.code == "unschedulable"
    assert "named template too small: 1g.10gb: 100 TFLOPS < 200 TFLOPS asked" in small.reason
    unknown = c.request(part("b", template="9g.1gb"))
    assert isinstance(unknown, ev.AllocationRejected) and "has no template '9g.1gb'" in unknown.reason


def test_no_template_holds_the_request() -> None:
    out = mig_cluster().request(part("a", 800))
    assert isinstance(out, ev.AllocationRejected) and "no template of A100-H100-80GB holds the request" in out.reason


def test_slot_fragmentation_queues_with_the_reason_until_a_run_frees() -> None:
    c = mig_cluster()
    starts = {granted(c, f"s{i}", template="1g.10gb").partitions[0].start: f"s{i}" for i in range(7)}
    assert sorted(starts) == [0, 1, 2, 3, 4, 5, 6]
    c.release(starts[1])
    c.release(starts[3])
    assert c.avail("g0")[0] >= 200_000 and c.avail("g0")[1] >= 20 * GB  # room in TFLOPS and VRAM, not in slots
    out = c.request(part("big", template="2g.20gb"))
    assert isinstance(out, ev.AllocationQueued) and out.code == "capacity"
    assert ("PartitionFilter", 1) in [(f.name, f.removed) for f in reasons.current(c.state, out.spec).filters]
    assert "no free run of 2 slot(s)" in out.reason  # the partition detail stays in the event
    assert "template 2g.20gb (named)" in out.reason
    assert "GPU g0: no free run of 2 slot(s) for 2g.20gb at starts [0, 2, 4] (free slots [1, 3, 7])" in out.reason
    after = c.release(starts[2])
    grant = next(e for e in after if isinstance(e, ev.AllocationGranted))
    assert grant.from_queue and grant.partitions[0] == Partition(template="2g.20gb", profile_id=14, start=2, end=4)


def test_least_waste_reason_lists_the_templates_not_chosen() -> None:
    c = mig_cluster()
    granted(c, "all", template="7g.80gb")
    out = c.request(part("a", 30, 15 * GB))
    assert isinstance(out, ev.AllocationQueued)
    assert "template 1g.20gb (least waste 1.533; others: 2g.20gb: waste 3.533" in out.reason
    assert "1g.10gb: 10G < 15G VRAM asked" in out.reason


def test_template_count_and_media_engine_limits() -> None:
    c = Cluster()  # a GPU reporting twice the capacity: the count limit, not the free amounts, stops the fifth
    c.node("n1", "p", a_gpu("g0", 1400, 160 * Gi, model=MIG, index=0))
    for i in range(4):
        granted(c, f"t{i}", template="1g.20gb")
    out = c.request(part("t4", template="1g.20gb"))
    assert isinstance(out, ev.AllocationQueued) and "1g.20gb at its limit 4/4" in out.reason
    c2 = mig_cluster()
    granted(c2, "m1", template="1g.10gb+me")
    out = c2.request(part("m2", template="1g.10gb+me"))
    assert isinstance(out, ev.AllocationQueued) and "1g.10gb+me at its limit 1/1" in out.reason


def test_partitioned_and_other_modes_never_share_a_gpu() -> None:
    c = mig_cluster()
    granted(c, "p1", template="1g.10gb")
    soft = c.request(a_request("soft", 10, Gi, pool="p"))
    shared = c.request(a_request("whole", pool="p", isolation="shared"))
    assert isinstance(soft, ev.AllocationQueued) and c.filters_now("soft")["PartitionFilter"] == 1
    assert isinstance(shared, ev.AllocationQueued) and c.filters_now("whole")["SharedWholeGPUFilter"] == 1
    after = c.release("p1")  # idle again: the soft request takes it, and then the partitioned one must wait
    assert [e.spec.allocation_id for e in after if isinstance(e, ev.AllocationGranted)] == ["soft"]
    out = c.request(part("p2", template="1g.10gb"))
    assert isinstance(out, ev.AllocationQueued)
    assert "GPU g0: GPU holds allocations of another isolation mode" in out.reason


def test_gpus_that_cannot_be_partitioned() -> None:
    no_mig = mig_cluster(isolation_capabilities=("shared", "soft", "hard"))
    out = no_mig.request(part("a", template="1g.10gb"))
    assert isinstance(out, ev.AllocationRejected) and "does not list partitioned" in out.reason
    c = Cluster()
    c.node("n1", "p", a_gpu("l4", 120, 24 * Gi, model="L4"))
    out = c.request(part("b"))
    assert isinstance(out, ev.AllocationRejected) and "model L4 has no MIG template table" in out.reason
    listed = mig_cluster(isolation_capabilities=("soft", "partitioned"))
    assert isinstance(listed.request(part("c")), ev.AllocationGranted)


def test_multi_gpu_request_takes_one_partition_per_gpu() -> None:
    c = mig_cluster(gpus=2)
    out = c.request(part("a", template="3g.40gb", count=2))
    assert isinstance(out, ev.AllocationGranted) and sorted(out.gpus) == ["g0", "g1"]
    assert [p.template for p in out.partitions] == ["3g.40gb", "3g.40gb"]
    assert c.state.usage["default"].requests_milli_tflops == 2 * 300_000


def test_release_restores_slots_capacity_and_usage_exactly() -> None:
    c = mig_cluster()
    before = msgspec.json.encode(c.state.gpus)
    for uid, template in (("a", "3g.40gb"), ("b", "2g.20gb"), ("c", "1g.10gb"), ("d", "1g.10gb")):
        granted(c, uid, template=template)
    assert c.replayed_digest() == digest(c.state)
    for uid in "cadb":
        c.release(uid)
    gpu = c.state.gpus["g0"]
    assert gpu.partitions == {} and gpu.charges == {} and (gpu.used_milli_tflops, gpu.used_vram_bytes) == (0, 0)
    assert c.state.usage == {} and msgspec.json.encode(c.state.gpus) == before


def test_quota_counts_the_template_size() -> None:
    c = mig_cluster()
    c.quota("default", a_quota(req=(250, 100 * GB), lim=(250, 100 * GB)))
    granted(c, "a", 30, 15 * GB)  # 1g.20gb: 100 TFLOPS and 20 GB count, not 30 TFLOPS and 15 GB
    granted(c, "b", 30, 15 * GB)
    usage = c.state.usage["default"]
    assert (usage.requests_milli_tflops, usage.requests_vram_bytes) == (200_000, 40 * GB)
    assert (usage.limits_milli_tflops, usage.limits_vram_bytes) == (200_000, 40 * GB)
    out = c.request(part("c", 30, 15 * GB))
    assert isinstance(out, ev.AllocationQueued) and out.code == "quota"
    assert out.quota_dimension == "total.max.tflops.request"


def test_a_partitioned_allocation_is_not_resized() -> None:
    c = mig_cluster()
    granted(c, "a", template="1g.10gb")
    out = c.resize("a", res(50, Gi), res(50, Gi))
    assert isinstance(out, ev.ResizeRejected) and out.code == "invalid" and "fixed size" in out.reason


def test_api_documents_show_each_partition() -> None:
    c = mig_cluster()
    granted(c, "a", template="3g.40gb")
    doc = documents.allocation_doc(c.state.allocations["a"])
    assert doc["partitions"] == [{"gpu": "g0", "template": "3g.40gb", "profile_id": 9, "start": 4, "end": 8}]
    explained = documents.explanation(c.state, c.state.allocations["a"], None)
    assert explained["reason"].endswith("; partitions: g0 3g.40gb at slots 4-7")
    assert views.gpu_view(c.state.gpus["g0"])["partitions"] == {
        "a": {"template": "3g.40gb", "profile_id": 9, "start": 4, "end": 8}}


def test_a_grant_logged_before_partitions_existed_still_decodes_and_folds() -> None:
    c = mig_cluster()
    old = codec.encode(ev.AllocationGranted(at=c.now, spec=a_request("x", 10, Gi, pool="p"), node="n1", gpus=("g0",),
                                            charges=(res(10, Gi),)))
    assert b"partitions" not in old
    event = codec.decode_event(old)
    assert isinstance(event, ev.AllocationGranted) and event.partitions == ()
    evolve(c.state, event)
    assert c.state.gpus["g0"].partitions == {} and c.state.allocations["x"].partitions == []


def _ask(c: Cluster, spec: AllocationSpec) -> list[ev.AnyEvent]:
    return c.send(it.RequestAllocation(intent_id=f"ask-{spec.allocation_id}", spec=spec))


def test_a_partitioned_request_preempts_soft_work_and_gets_its_partition() -> None:
    c = mig_cluster()
    c.request(a_request("low", 500, 40 * Gi, pool="p", qos="low"))
    out = _ask(c, a_request("vip", pool="p", qos="critical", isolation="partitioned", partition_template="3g.40gb"))
    grant = out[-1]
    assert [type(e).__name__ for e in out] == ["AllocationPreempted", "AllocationGranted"]
    assert isinstance(grant, ev.AllocationGranted) and grant.preempted == ("low",)
    assert grant.partitions == (Partition(template="3g.40gb", profile_id=9, start=4, end=8),)
    assert grant.charges == (Resources(milli_tflops=300_000, vram_bytes=40 * GB),)
    assert c.state.usage["default"].requests_milli_tflops == 300_000
    assert c.replayed_digest() == digest(c.state)


def test_partitioned_victims_free_their_slots_for_the_preemptor() -> None:
    c = mig_cluster()
    for uid in ("a", "b"):
        c.request(a_request(uid, pool="p", qos="low", isolation="partitioned", partition_template="3g.40gb"))
    out = _ask(c, a_request("vip", pool="p", qos="critical", isolation="partitioned", partition_template="4g.40gb"))
    grant = out[-1]
    assert isinstance(grant, ev.AllocationGranted) and grant.preempted == ("b",)  # b's 3g holds slot 0, a's slot 4
    assert grant.partitions[0] == Partition(template="4g.40gb", profile_id=5, start=0, end=4)
    assert sorted(c.state.gpus["g0"].partitions) == ["a", "vip"]
    soft = _ask(c, a_request("soft-vip", 10, Gi, pool="p", qos="critical"))  # taking a would still leave vip's
    assert [type(e).__name__ for e in soft] == ["AllocationQueued"]           # partition: soft never joins it
    assert c.replayed_digest() == digest(c.state)


def test_a_gang_of_partitioned_members_places_each_partition_once() -> None:
    c = mig_cluster()
    gang = GangSpec(key="default/mig", quorum=3, desired=3)
    out: list[ev.AnyEvent] = []
    for i in range(3):  # 3g + 3g fill the slots; the third member would need a third 3g: the gang waits
        out = c.send(it.RequestAllocation(intent_id=f"g{i}", spec=msgspec.structs.replace(
            part(f"m{i}", template="3g.40gb"), gang=gang)))
    assert not any(isinstance(e, ev.AllocationGranted) for e in out)
    assert c.state.gpus["g0"].partitions == {} and c.state.gpus["g0"].charges == {}  # scratch trials left no trace
    c.node("n2", "p", a_gpu("g9", 700, 80 * Gi, model=MIG, index=0))
    grants = [e for e in c.events if isinstance(e, ev.AllocationGranted)]
    assert len(grants) == 3 and all(len(g.partitions) == 1 for g in grants)
    held = [p for gpu in c.state.gpus.values() for p in gpu.partitions.values()]
    assert sorted((p.template, p.start) for p in held) == [("3g.40gb", 0), ("3g.40gb", 4), ("3g.40gb", 4)]
    assert c.replayed_digest() == digest(c.state)


def test_a_template_outside_the_contract_is_an_intent_rejected_not_an_unreplayable_grant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from services.allocator.domain.profile import TEMPLATES

    family = TEMPLATES.family_of(MIG)
    assert family is not None
    broken = msgspec.structs.replace(family, profiles=tuple(
        msgspec.structs.replace(p, nvml_profile_id=99) for p in family.profiles))
    monkeypatch.setattr(TEMPLATES, "_by_model", {**TEMPLATES._by_model, MIG: broken})  # past the table's own check
    c = mig_cluster()
    [refused] = c.send(it.RequestAllocation(intent_id="mig-99", spec=part("a", template="1g.10gb")))
    assert isinstance(refused, ev.IntentRejected) and refused.field == "profile_id" and refused.value == "99", refused
    assert "a" not in c.state.allocations and c.avail("g0") == (700_000, 80 * Gi)
    assert codec.decode_event(codec.encode(refused)) == refused  # the log stays replayable
