"""TensorFusion webhook behaviour cases C33-C57 as table tests of compose(), plus C10/C15/C32 through review().

Deviations from TensorFusion (deny instead of silently dropping a value) are marked DEV and
listed in docs/compatibility.md.
"""

from __future__ import annotations

import base64

import msgspec
import pytest

from events.values import QuotaSpec, Resources
from services.admission.review import review
from services.admission.view import ClusterView
from services.podspec import ComposeContext, PoolDefaults, keys
from tests.unit.admission.builders import GI, MOCK_POOL, a_pod, a_profile, a_review
from tests.unit.admission.caseruns import Case, check

QUOTA = QuotaSpec(default_requests=Resources(milli_tflops=500, vram_bytes=GI),
                  default_limits=Resources(milli_tflops=1000, vram_bytes=2 * GI))
TF = {"tflops-limit": "100", "vram-limit": "16Gi"}
RES = {"tflops-request": "1"}
NOT_INT = "not a whole number"

CASES = [
    Case("C33", a_pod({"workload-profile": "p", "compute-percent-request": "50"}),
         profile=a_profile({"resources": {"requests": {"tflops": "5"}}}),
         error="tflops- and computePercent request are mutually exclusive, please specify only one"),
    Case("C34", a_pod({"workload-profile": "p", "compute-percent-limit": "50"}),
         profile=a_profile({"resources": {"limits": {"tflops": "100"}}}),
         error="tflops- and computePercent limit are mutually exclusive, please specify only one"),
    Case("C35", a_pod({"compute-percent-request": "50"}), quota=QUOTA,
         error="tflops- and computePercent request are mutually exclusive"),
    Case("C36", a_pod({}), quota=QUOTA, expect={"req": (500, 0, GI), "lim": (1000, 0, 2 * GI), "qos": "medium",
                                                "changes": {keys.TFLOPS_REQUEST: "500m"}}),
    Case("C37-DEV", a_pod({"tflops-request": "10", "compute-percent-request": "50"}),
         error="TFLOPS and compute-percent are mutually exclusive", error_field=keys.PERCENT_REQUEST),
    Case("C38-DEV", a_pod({"tflops-limit": "20", "compute-percent-request": "30"}),
         error="mutually exclusive", error_field=keys.PERCENT_REQUEST),
    Case("C39", a_pod({"compute-percent-limit": "80"}),
         expect={"req": (0, 80_000, 0), "lim": (0, 80_000, 0),
                 "changes": {keys.PERCENT_REQUEST: "80"}, "unchanged": (keys.PERCENT_LIMIT,)}),
    Case("C40", a_pod({"tflops-limit": "20", "vram-limit": "4Gi"}),
         expect={"req": (20_000, 0, 4 * GI), "lim": (20_000, 0, 4 * GI), "qos": "high"}),
    Case("C41", a_pod({"tflops-request": "10", "vram-request": "4Gi"}),
         expect={"lim": (0, 0, 0), "qos": "medium", "not_written": (keys.TFLOPS_LIMIT, keys.VRAM_LIMIT)}),
    Case("C42-DEV", a_pod({"tflops-request": "ten", "vram-request": "4Gi"}),
         error=f"{keys.TFLOPS_REQUEST}='ten': not a Kubernetes quantity", error_field=keys.TFLOPS_REQUEST),
] + [
    Case(f"C43-{raw or 'empty'}", a_pod({"gpu-count": raw, **RES}), error=msg, error_field=keys.GPU_COUNT)
    for raw, msg in (("0", "invalid gpuCount value 0: must be in [1, 128]"),
                     ("129", "invalid gpuCount value 129: must be in [1, 128]"),
                     ("-2", "invalid gpuCount value -2: must be in [1, 128]"),
                     ("abc", "gpu-count='abc': invalid gpuCount value: " + NOT_INT),
                     ("", "gpu-count='': invalid gpuCount value: " + NOT_INT),
                     ("2147483648", "gpu-count='2147483648': invalid gpuCount value 2147483648: must be in [1, 128]"),
                     ("9" * 5000, "invalid gpuCount value 99999"),
                     ("²", "invalid gpuCount value: " + NOT_INT))
] + [
    Case("C44", a_pod({"gpu-indices": "0,2", "gpu-count": "2", **RES}), expect={"count": 2, "indices": (0, 2)}),
    Case("C44-no-count", a_pod({"gpu-indices": " 0, 2", **RES}), expect={"count": 2, "indices": (0, 2)}),
    Case("C44-DEV", a_pod({"gpu-indices": "0,2", "gpu-count": "4", **RES}), error="disagrees with",
         error_field=keys.GPU_COUNT),
] + [
    Case(f"C45-{raw}", a_pod({"gpu-indices": raw, **RES}), error=f"{keys.GPU_INDICES} annotation is not valid for"
         " Pod p1", error_field=keys.GPU_INDICES) for raw in ("a,b", "0,", "-1")
] + [
    Case("C46", a_pod(RES, containers=[("a", {}), ("b", {})]),
         error="inject container has to be specified when Pod containers > 1", error_field=keys.INJECT_CONTAINER),
    Case("C47-no-model", a_pod({"dedicated-gpu": "true"}),
         error="handle dedicated GPU: dedicated GPU requires gpu-model annotation to be specified"),
    Case("C47-unknown", a_pod({"dedicated-gpu": "true", "gpu-model": "X100"}),
         error="handle dedicated GPU: could not find capacity information for GPU model: X100",
         error_field=keys.GPU_MODEL),
    Case("C48", a_pod({"vendor": "AMD", **RES}), error='isolation=soft is not supported for vendor "AMD"; set'
         f" annotation {keys.ISOLATION}=partitioned or pick another mode", error_field=keys.ISOLATION),
    Case("C49-unknown", a_pod({"gpupool": "nope", **RES}), context=ComposeContext(known_pools=frozenset({"mock", "b"})),
         error="gpu pool not found (known pools: b, mock)", error_field=keys.POOL),
    Case("C49-no-default", a_pod(RES), pool=PoolDefaults(name=""), error="gpu pool not found"),
    Case("C50", a_pod({"workload-profile": "missing", **RES}),
         error='get workload profile(missing) : workloadprofiles.tensor-fusion.ai "missing" not found',
         error_field=keys.WORKLOAD_PROFILE),
    Case("C51", a_pod({"gpupool": "mock", "workload-profile": "p", **RES}), pool=PoolDefaults(name="other"),
         profile=a_profile({"poolName": "other", "isLocalGPU": False, "isolation": "hard", "gpuIndices": [1],
                            "qos": "low"}),
         expect={"pool": "mock", "local": True, "iso": "soft", "indices": (), "qos": "low"}),
    Case("C52", a_pod({"worker-pod-template": "spec: {}", **RES}),
         error="worker pod template is not supported in localGPU mode", error_field=keys.WORKER_POD_TEMPLATE),
    Case("C53", a_pod({"enabled-replicas": "abc", **RES}),
         error="enabled-replicas='abc': invalid enabledReplicas value: " + NOT_INT),
    Case("C54-all", a_pod({"autoscale": "true", **RES}),
         expect={"attrs": {keys.AUTOSCALE: "true", keys.AUTOSCALE_TARGET: "all"}}),
    Case("C54-vram", a_pod({"autoscale": "true", "autoscale-target": "vram", **RES}),
         expect={"attrs": {keys.AUTOSCALE_TARGET: "vram"}}),
    Case("C55", a_pod({"tflops-limit": "1000", "vram-limit": "2048Mi", "tflops-request": "0.5",
                       "vram-request": "1.5Gi"}),
         expect={"changes": {keys.TFLOPS_LIMIT: "1k", keys.VRAM_LIMIT: "2Gi", keys.TFLOPS_REQUEST: "500m",
                             keys.VRAM_REQUEST: "1536Mi"}}),
    Case("C55-DEV", a_pod({"tflops-limit": "1000", "vram-limit": "1024Mi", "tflops-request": "0.5",
                           "vram-request": "1.5Gi"}),
         error=f"{keys.VRAM_REQUEST}=1536Mi exceeds {keys.VRAM_LIMIT}=1Gi", error_field=keys.VRAM_REQUEST),
    Case("C56", a_pod({"sidecar-worker": "true", "is-local-gpu": "false", **RES}),
         expect={"local": True, "attrs": {keys.SIDECAR_WORKER: "true"}}),
    Case("C57", a_pod({"qos": "critical", **RES}, priorityClassName="foo"), expect={"qos": "critical"}),
    Case("DEV-qos", a_pod({"qos": "urgent", **RES}), error="must be one of critical, high, medium, low",
         error_field=keys.QOS),
    Case("DEV-request-above-limit", a_pod({"tflops-request": "20", "tflops-limit": "10"}),
         error="exceeds tensor-fusion.ai/tflops-limit=10", error_field=keys.TFLOPS_REQUEST),
    Case("DEV-negative", a_pod({"vram-request": "-1Gi"}), error="must not be negative", error_field=keys.VRAM_REQUEST),
    Case("DEV-bool", a_pod({"is-local-gpu": "True", **RES}), error='must be "true" or "false"'),
    Case("DEV-isolation", a_pod({"isolation": "strict", **RES}), error="must be one of", error_field=keys.ISOLATION),
    Case("DEV-percent-over-100", a_pod({"compute-percent-request": "150"}), error="more than one whole GPU"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_spec_case(case: Case) -> None:
    check(case)


VIEW = ClusterView(pool=MOCK_POOL)


def _response(body: bytes) -> dict:
    from services.admission.review import response_body
    return msgspec.json.decode(response_body(review(body, view=VIEW)))["response"]


def test_c10_pod_without_label_is_allowed_unchanged() -> None:
    pod = a_pod({})
    pod["metadata"]["labels"] = {}
    response = _response(a_review(pod))
    assert response["allowed"] and "patch" not in response


def test_c15_invalid_json_is_denied_with_400() -> None:
    response = _response(b"invalid json")
    assert response["allowed"] is False and response["status"]["code"] == 400


def test_c32_unlabelled_native_gpu_pod_is_not_migrated() -> None:
    pod = a_pod({"gpupool": "mock"}, containers=[("main", {"nvidia.com/gpu": "1"})])
    pod["metadata"]["labels"] = {}
    response = _response(a_review(pod))
    assert response["allowed"] and "patch" not in response


def test_c12_native_limit_is_removed_from_the_container() -> None:
    pod = a_pod({**TF, "gpupool": "mock"}, containers=[("main", {"nvidia.com/gpu": "3"})])
    ops = msgspec.json.decode(base64.b64decode(_response(a_review(pod))["patch"]))
    assert {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"} in ops
