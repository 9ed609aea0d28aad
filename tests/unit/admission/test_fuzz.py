"""Hypothesis fuzzing: annotation maps through compose(), whole AdmissionReview bodies through review().

Invariants: compose either returns a spec within the contract (1..128 GPUs, TFLOPS and percent never
both on one side, request <= limit) or raises PodSpecError naming a field; applying the webhook's
own patch and composing again yields the same request (the canonical annotations are a fixed
point); review() never raises and always answers allow or deny with a message.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import jsonpatch
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import guard
from services.admission.review import response_body, review
from services.admission.view import ClusterView
from services.podspec import PodSpecError, compose, keys
from tests.unit.admission.builders import MOCK_POOL, a_pod, a_review

QUANTITIES = st.sampled_from(["0", "1", "10", "0.5", "500m", "1k", "1Gi", "1024Mi", "1.5Gi", "16Gi", "100", "150",
                              "-1", "ten", "", "1e3", "2Ki", "80", "12", " 5", "1K",
                              "8Ei", "4Ti", "4097Gi", "1e999999999", "1e-999", "9" * 100, "10000000", "1e7", "1e31"])
VALUES: dict[str, st.SearchStrategy[str]] = {
    **{k: QUANTITIES for k in keys.RESOURCE_KEYS},
    keys.GPU_COUNT: st.sampled_from(["1", "2", "4", "0", "129", "abc", "", "-1", "3000000000", "9" * 5000, "²"]),
    keys.GPU_INDICES: st.sampled_from(["0", "0,2", "1, 3", "a,b", "0,", "-1", "0,0", "", "9" * 5000, "1023", "1024",
                                       "²", "0," * 2000]),
    keys.QOS: st.sampled_from(["low", "medium", "high", "critical", "", "urgent"]),
    keys.ISOLATION: st.sampled_from(["shared", "soft", "hard", "partitioned", "strict"]),
    keys.IS_LOCAL_GPU: st.sampled_from(["true", "false", "True"]),
    keys.SIDECAR_WORKER: st.sampled_from(["true", "false"]),
    keys.PARTITION_ID: st.sampled_from(["1g.10gb", ""]),
    keys.VENDOR: st.sampled_from(["NVIDIA", "AMD", "Ascend", ""]),
    keys.GPU_MODEL: st.sampled_from(["A100", "H100"]),
    keys.POOL: st.sampled_from(["mock", "other"]),
    keys.GANG_ENABLED: st.sampled_from(["true", "false"]),
    keys.GANG_MIN_MEMBERS: st.sampled_from(["0", "1", "2", "5", "x"]),
    keys.ENABLED_REPLICAS: st.sampled_from(["1", "3", "x"]),
    keys.AUTOSCALE: st.sampled_from(["true"]),
    keys.DEDICATED_GPU: st.sampled_from(["true", "false"]),
}
ANNOTATIONS = st.dictionaries(st.sampled_from(sorted(VALUES)), st.just(""), max_size=9).flatmap(
    lambda chosen: st.fixed_dictionaries({k: VALUES[k] for k in chosen}))
NATIVE = st.sampled_from([{}, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1000"}])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(annotations=ANNOTATIONS, native=NATIVE)
def test_compose_is_total_and_canonical_annotations_are_a_fixed_point(annotations: dict[str, str],
                                                                      native: dict[str, str]) -> None:
    pod = a_pod(annotations, containers=[("main", native)])
    try:
        spec = compose(pod, pool_defaults=MOCK_POOL)
    except PodSpecError as exc:
        assert exc.field and str(exc)
        return
    request, limit = spec.request, spec.limit
    assert guard.check_message(spec) is spec
    assert 1 <= spec.gpu_count <= 128
    assert not (request.milli_tflops and request.compute_milli_percent)
    assert not (limit.milli_tflops and limit.compute_milli_percent)
    for asked, cap in ((request.milli_tflops, limit.milli_tflops), (request.vram_bytes, limit.vram_bytes)):
        assert not cap or asked <= cap
    response = msgspec.json.decode(response_body(review(a_review(pod), view=ClusterView(pool=MOCK_POOL))))
    ops = msgspec.json.decode(base64.b64decode(response["response"]["patch"]))
    again = compose(jsonpatch.apply_patch(copy.deepcopy(pod), ops), pool_defaults=MOCK_POOL)
    assert (again.request, again.limit, again.gpu_count, again.qos, again.isolation, again.pool) == (
        spec.request, spec.limit, spec.gpu_count, spec.qos, spec.isolation, spec.pool)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                    | st.sampled_from(["9" * 5000, "8Ei", "1e999999999", "é" * 300]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=12)
FIELD_PATHS = [("request",), ("request", "object"), ("request", "object", "metadata"),
               ("request", "object", "metadata", "annotations"), ("request", "object", "metadata", "labels"),
               ("request", "object", "spec"), ("request", "object", "spec", "containers"), ("request", "uid"),
               ("request", "operation"), ("request", "kind"), ("request", "dryRun"),
               ("request", "object", "metadata", "ownerReferences")]


@st.composite
def reviews(draw: st.DrawFn) -> bytes:
    """A valid review of an admissible pod with one field replaced by arbitrary JSON, or raw junk."""
    choice = draw(st.integers(0, 11))
    if choice == 0:
        return draw(st.binary(max_size=40))
    body: dict[str, Any] = msgspec.json.decode(a_review(a_pod({"tflops-request": "1", "vram-limit": "1Gi"},
                                                              containers=[("main", {"nvidia.com/gpu": "1"})])))
    path = draw(st.sampled_from(FIELD_PATHS))
    target = body
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = draw(JSON)
    encoded = msgspec.json.encode(body)
    if choice == 1:  # nesting far deeper than the decoder may recurse, or just past the limit
        depth = draw(st.sampled_from([129, 5000, 100_000]))
        return encoded[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"
    if choice == 2:  # one Latin-1 byte inside a string, or a number beyond any range
        return encoded.replace(b'"rev-1"', draw(st.sampled_from([b'"r\xe9v"', b"1e999999", b"9" * 5000])), 1)
    return encoded


@settings(max_examples=300, deadline=None)
@given(body=reviews())
def test_review_never_raises_and_always_answers_with_a_message(body: bytes) -> None:
    verdict = review(body, view=ClusterView(pool=MOCK_POOL))
    assert verdict.message and verdict.code in (200, 400) and len(verdict.message.encode()) <= 1024
    assert verdict.allowed or not verdict.patch
    response = msgspec.json.decode(response_body(verdict))["response"]
    assert response["allowed"] is verdict.allowed and response["status"]["message"] == verdict.message
