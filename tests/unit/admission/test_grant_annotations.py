"""Bind annotations: TensorFusion's effective-hard-sm-percent and per-container GPU mapping."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events import decisions
from events.values import AllocationSpec, GpuSpec, Resources
from services.admission.binding import pin_ops
from services.admission.book import AllocationBook
from services.admission.grant_annotations import bind_annotations, container_gpus, hard_sm_percent
from services.podspec import keys

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(*, isolation: str = "hard", limit: Resources | None = None, counts: str = "") -> AllocationSpec:
    return AllocationSpec(
        allocation_id="a", namespace="default", pod="p", pool="pool", isolation=isolation,
        request=Resources(milli_tflops=1_000), limit=limit or Resources(milli_tflops=10_000),
        gpu_count=3, attributes={keys.CONTAINER_GPU_COUNT: counts} if counts else {})


def test_hard_sm_percent_is_tensorfusions_ceiling_of_limit_over_capacity() -> None:
    # TensorFusion hard_sm_percent_test.go: 10 TFLOPS on a 71-TFLOPS GPU -> 15
    assert hard_sm_percent(_spec(), 71_000) == 15
    assert hard_sm_percent(_spec(limit=Resources(milli_tflops=1)), 989_000) == 1
    assert hard_sm_percent(_spec(limit=Resources(milli_tflops=2_000_000)), 989_000) == 100
    assert hard_sm_percent(_spec(limit=Resources(milli_tflops=98_900)), 989_000) == 10  # exact: no float 10.000001


@pytest.mark.parametrize("spec", [
    _spec(isolation="soft"),
    _spec(limit=Resources(vram_bytes=2**30)),
    _spec(limit=Resources(milli_tflops=10_000, compute_milli_percent=50_000)),
])
def test_no_hard_sm_percent_unless_hard_with_a_tflops_limit(spec: AllocationSpec) -> None:
    assert hard_sm_percent(spec, 71_000) is None


@given(st.integers(1, 10**10), st.integers(1, 10**10))
def test_hard_sm_percent_is_the_smallest_whole_percent_covering_the_limit(limit: int, capacity: int) -> None:
    percent = hard_sm_percent(_spec(limit=Resources(milli_tflops=limit)), capacity)
    assert percent is not None and 1 <= percent <= 100
    if 1 < percent < 100:
        assert (percent - 1) * capacity < limit * 100 <= percent * capacity


def test_containers_take_consecutive_gpus_in_name_order() -> None:
    mapping, why = container_gpus(_spec(counts='{"trainer":2,"agent":1}'), ("g0", "g1", "g2"))
    assert why == "" and json.loads(mapping or "") == {"agent": ["g0"], "trainer": ["g1", "g2"]}
    assert container_gpus(_spec(), ("g0",)) == (None, "")


@pytest.mark.parametrize(("counts", "why"), [
    ('{"a":2,"b":2}', "not enough GPUs: need 2 more for container b"),
    ('{"a":-1}', "whole numbers >= 0"),
    ('{"a":1.5}', "whole numbers >= 0"),
    ('{"a":true}', "whole numbers >= 0"),
    ('["a"]', "whole numbers >= 0"),
    ("{", "not JSON"),
])
def test_unmappable_counts_leave_the_annotation_out_with_a_reason(counts: str, why: str) -> None:
    mapping, problem = container_gpus(_spec(counts=counts), ("g0", "g1", "g2"))
    assert mapping is None and why in problem


def _registered(capacity: int) -> decisions.NodeRegistered:
    gpus = tuple(GpuSpec(name=f"g{i}", capacity=Resources(milli_tflops=capacity, vram_bytes=2**34), index=i)
                 for i in range(3))
    return decisions.NodeRegistered(at=NOW, node="n", pool="pool", gpus=gpus)


def _granted(spec: AllocationSpec) -> decisions.AllocationGranted:
    return decisions.AllocationGranted(at=NOW, spec=spec, node="n", gpus=("g0", "g1", "g2"),
                                       charges=(Resources(milli_tflops=1_000),) * 3)


def test_the_book_computes_the_annotations_from_the_registered_capacity() -> None:
    book = AllocationBook()
    book.apply(_registered(71_000))
    grant = book.apply(_granted(_spec(counts='{"a":1,"b":2}')))
    assert grant is not None and grant.problems == ()
    tensor_fusion = {k: v for k, v in grant.annotations.items() if k.startswith(keys.DOMAIN)}
    assert tensor_fusion == {keys.EFFECTIVE_HARD_SM_PERCENT: "15",
                             keys.CONTAINER_GPUS: '{"a":["g0"],"b":["g1","g2"]}'}
    # no UUID reported: the devices are named by NVML index (pool unconfigured: enforcement none)
    assert grant.annotations["a.device.gpuledger.io/NVIDIA_VISIBLE_DEVICES"] == "0"
    assert grant.annotations["b.device.gpuledger.io/NVIDIA_VISIBLE_DEVICES"] == "1,2"


def test_unknown_capacity_is_a_problem_not_a_wrong_percent() -> None:
    annotations, problems = bind_annotations(_spec(), ("g9",), {})
    assert annotations == {} and problems == [f"{keys.EFFECTIVE_HARD_SM_PERCENT}: capacity of GPU g9 unknown"]


def test_pin_writes_the_annotations_once() -> None:
    book = AllocationBook()
    book.apply(_registered(71_000))
    grant = book.apply(_granted(_spec(counts='{"a":3}')))
    assert grant is not None
    pod: dict[str, Any] = {"metadata": {"name": "p", "annotations": {keys.QOS: "high"}}, "spec": {"containers": []}}
    bound = jsonpatch.apply_patch(copy.deepcopy(pod), pin_ops(pod, grant=grant))
    assert bound["metadata"]["annotations"] == {
        keys.QOS: "high", keys.GPU_IDS: "g0,g1,g2", keys.EFFECTIVE_HARD_SM_PERCENT: "15",
        keys.CONTAINER_GPUS: '{"a":["g0","g1","g2"]}', "a.device.gpuledger.io/NVIDIA_VISIBLE_DEVICES": "0,1,2"}
    assert pin_ops(bound, grant=grant) == []
