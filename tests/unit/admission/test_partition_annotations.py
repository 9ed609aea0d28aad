"""The binder writes what a MIG-aware runtime needs for a partitioned grant: template, GPU, slots."""

from __future__ import annotations

import copy
import json

import jsonpatch

from events import decisions
from events.values import AllocationSpec, Partition, Resources
from services.admission.binding import pin_ops
from services.admission.book import AllocationBook
from services.admission.partition_annotations import partition_annotations
from services.podspec import keys
from tests.unit.allocator.builders import Cluster, Gi, a_gpu


def test_a_partitioned_grant_is_bound_with_template_gpu_and_slots() -> None:
    c = Cluster()
    c.node("n1", "p", a_gpu("g0", 700, 80 * Gi, model="A100_SXM_80G", index=0))
    spec = AllocationSpec(allocation_id="a", namespace="ns", pod="pod-a", pool="p", request=Resources(),
                          limit=Resources(), isolation="partitioned", partition_template="3g.40gb")
    granted = c.request(spec)
    assert isinstance(granted, decisions.AllocationGranted)
    book = AllocationBook()
    grant = book.apply(granted)
    assert grant is not None
    assert grant.annotations[keys.PARTITION_ID] == "3g.40gb"
    assert json.loads(grant.annotations[keys.PARTITIONS]) == [
        {"gpu": "g0", "template": "3g.40gb", "profile_id": 9, "start": 4, "end": 8}]
    pod = {"metadata": {"name": "pod-a", "annotations": {}},
           "spec": {"containers": [], "schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}
    bound = jsonpatch.apply_patch(copy.deepcopy(pod), pin_ops(pod, grant=grant))
    assert bound["metadata"]["annotations"][keys.PARTITION_ID] == "3g.40gb"
    assert bound["metadata"]["annotations"][keys.GPU_IDS] == "g0"


def test_one_template_per_gpu_when_they_differ_and_nothing_for_other_modes() -> None:
    parts = (Partition(template="1g.10gb", profile_id=19, start=6, end=7),
             Partition(template="1g.12gb", profile_id=19, start=6, end=7))
    out = partition_annotations(("g0", "g1"), parts)
    assert out[keys.PARTITION_ID] == "1g.10gb,1g.12gb"
    assert [row["gpu"] for row in json.loads(out[keys.PARTITIONS])] == ["g0", "g1"]
    assert partition_annotations(("g0",), ()) == {}
