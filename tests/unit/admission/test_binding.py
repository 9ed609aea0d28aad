"""Pure parts of the binder: bind patches (idempotent, KEP-3838-safe), the event book, quota parsing."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import pytest

from events import decisions
from events.values import AllocationSpec, GpuSpec, PoolConfig, QuotaAmount, Resources
from services.admission.binding import claim_refusal, is_gated, pin_ops, ungate_ops
from services.admission.book import AllocationBook, Grant
from services.admission.quota import parse_quota
from services.admission.view import ClusterView
from services.podspec import PodSpecError, keys

GRANT = Grant(allocation_id="a", namespace="default", pod="p", node="node-1", gpus=("g1", "g2"))
REQ = {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": {}},
            "spec": {"containers": [], "schedulingGates": [{"name": keys.SCHEDULING_GATE}], **spec}}


def _bind(pod: dict[str, Any]) -> dict[str, Any]:
    pod = jsonpatch.apply_patch(copy.deepcopy(pod), pin_ops(pod, grant=GRANT))
    return jsonpatch.apply_patch(pod, ungate_ops(pod))


@pytest.mark.parametrize("affinity", [None, {}, {"nodeAffinity": {}},
                                      {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                          "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In",
                                                                                       "values": ["a"]}]},
                                                                {"matchFields": [{"key": "x", "operator": "In",
                                                                                  "values": ["y"]}]}]}}}])
def test_bind_pins_every_term_then_ungates_and_is_idempotent(affinity: dict[str, Any] | None) -> None:
    pod = _pod(**({"affinity": affinity} if affinity is not None else {}))
    bound = _bind(pod)
    terms = bound["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert all(REQ in term["matchFields"] for term in terms)
    if affinity and affinity.get("nodeAffinity"):
        assert terms[0]["matchExpressions"][0]["key"] == "zone"  # existing requirements kept
    assert bound["metadata"]["annotations"][keys.GPU_IDS] == "g1,g2" and not is_gated(bound)
    assert pin_ops(bound, grant=GRANT) == [] and ungate_ops(bound) == []


def test_ungate_is_guarded_by_a_test_op() -> None:
    pod = _pod()
    ops = ungate_ops(pod)
    pod["spec"]["schedulingGates"] = [{"name": "other"}]  # changed under our feet
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(pod, ops)


def _spec(allocation_id: str) -> AllocationSpec:
    return AllocationSpec(allocation_id=allocation_id, namespace="ns", pod="p", pool="pool", request=Resources(),
                          limit=Resources())


def test_book_tracks_grants_queue_and_releases_and_feeds_the_view() -> None:
    book, view = AllocationBook(), ClusterView()
    gpu = GpuSpec(name="g", capacity=Resources(milli_tflops=312_000, vram_bytes=2**35), model="A100")
    book.apply(decisions.NodeRegistered(at=NOW, node="n", pool="pool", gpus=(gpu,)), view=view)
    book.apply(decisions.AllocationQueued(at=NOW, spec=_spec("q"), reason="full", code="capacity"))
    grant = book.apply(decisions.AllocationGranted(at=NOW, spec=_spec("q"), node="n", gpus=("g",), charges=()))
    book.apply(decisions.AllocationQueued(at=NOW, spec=_spec("r"), reason="full", code="capacity"))
    assert grant is not None and grant.node == "n" and book.live() == {"q": "ns", "r": "ns"}
    book.apply(decisions.AllocationReleased(at=NOW, allocation_id="q", namespace="ns", pod="p", pool="pool"))
    book.apply(decisions.AllocationRejected(at=NOW, spec=_spec("r"), reason="never", code="invalid"))
    assert book.live() == {} and view.pools == {"pool"} and view.model_capacity["A100"] == gpu.capacity


def test_the_views_known_pools_are_those_with_a_node_or_a_configuration() -> None:
    """As the reader's API checks a Pod's pool (services/allocator/api/bounds.compose_pod): a pool
    is known while it has a node or a configuration; with none known, nothing is checked."""
    book, view = AllocationBook(), ClusterView()
    book.apply(decisions.NodeRegistered(at=NOW, node="n", pool="a"), view=view)
    book.apply(decisions.PoolConfigured(at=NOW, pool="b", config=PoolConfig(enforcement="hami-core")), view=view)
    assert view.pools == {"a", "b"} and view.context(review_uid="u").known_pools == {"a", "b"}
    book.apply(decisions.NodeRegistered(at=NOW, node="n", pool="c"), view=view)  # the node moved
    assert view.pools == {"b", "c"}
    book.apply(decisions.NodeRemoved(at=NOW, node="n", pool="c"), view=view)
    book.apply(decisions.PoolRemoved(at=NOW, pool="b"), view=view)
    assert view.pools == set() and view.context(review_uid="u").known_pools is None
    assert "b" not in view.enforcement and "b" not in book.enforcement  # the removed pool's mode is the default again


def test_quota_object_becomes_quota_spec_with_unbounded_dimensions_left_none() -> None:
    spec = parse_quota({"spec": {"total": {"requests": {"tflops": "100"}, "maxWorkers": 10},
                                 "single": {"maxGPUCount": 4, "defaultLimits": {"tflops": "1", "vram": "2Gi"}}}})
    assert spec.total_requests == QuotaAmount(milli_tflops=100_000, vram_bytes=None)
    assert (spec.max_workers, spec.max_gpu_count, spec.alert_threshold_percent) == (10, 4, 95)
    assert spec.default_limits == Resources(milli_tflops=1000, vram_bytes=2 * 2**30)
    with pytest.raises(PodSpecError) as caught:
        parse_quota({"spec": {"single": {"maxRequests": {"vram": "lots"}}}})
    assert caught.value.field == "spec.single.maxRequests.vram"


def _claimant(name: str, *, namespace: str = "default", generate_name: str = "",
              enabled: bool = True) -> dict[str, Any]:
    labels = {keys.ALLOCATION_ID_LABEL: "a", **({keys.ENABLED: "true"} if enabled else {})}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    return {"metadata": {**meta, "generateName": generate_name} if generate_name else meta}


@pytest.mark.parametrize(("pod", "owner", "refused"), [
    (_claimant("p"), ("default", "p"), None),
    (_claimant("web-7d9f-abcde", generate_name="web-7d9f-"), ("default", "web-7d9f-"), None),  # named after admission
    (_claimant("p"), None, None),  # allocation not known yet: only the label is checked
    (_claimant("p", enabled=False), None, "did not admit it"),
    (_claimant("p", enabled=False), ("default", "p"), "did not admit it"),
    (_claimant("p", namespace="intruder"), ("default", "p"), "a pod of namespace 'default'"),
    (_claimant("q"), ("default", "p"), "belongs to pod 'p'"),
    (_claimant("web-7d9f-abcde"), ("default", "web-7d9f-"), "belongs to pod 'web-7d9f-'"),  # no generateName
    (_claimant("web-7d9f-abcde", generate_name="web-"), ("default", "web-7d9f-"), "belongs to pod 'web-7d9f-'"),
    (_claimant("other", generate_name="web-7d9f-"), ("default", "web-7d9f-"), "belongs to pod 'web-7d9f-'"),
])
def test_only_the_admitted_pod_may_stand_for_its_allocation(pod: dict[str, Any], owner: tuple[str, str] | None,
                                                            refused: str | None) -> None:
    problem = claim_refusal(pod, owner)
    assert problem is None if refused is None else problem is not None and refused in problem
