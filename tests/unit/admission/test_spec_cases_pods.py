"""TensorFusion webhook behaviour cases C1-C32c as table tests of compose() (the pure parser).

Rows that concern TensorFusion machinery gpuledger does not build (client injection, workload
CRs, grey-release counters, auto-migration of unlabelled pods) assert what gpuledger does
instead; docs/compatibility.md lists each such case.
"""

from __future__ import annotations

import pytest

from events.values import Resources
from services.podspec import ComposeContext, keys
from tests.unit.admission.builders import GI, a_pod, a_profile
from tests.unit.admission.caseruns import Case, check

TF = {"tflops-limit": "100", "vram-limit": "16Gi"}
PROFILE_RES = {"resources": {"requests": {"tflops": "10", "vram": "1Gi"}, "limits": {"tflops": "100", "vram": "16Gi"}}}
A100 = ComposeContext(model_capacity={"A100": Resources(milli_tflops=312_000, vram_bytes=40 * GI)}, review_uid="r")
FULL = ((100_000, 0, 16 * GI), (100_000, 0, 16 * GI))

CASES = [
    Case("C1", a_pod({"gpupool": "mock", "inject-container": "main", **TF, "tflops-request": "10",
                      "vram-request": "1Gi"}, owner=("ReplicaSet", "test-workload")),
         expect={"req": (10_000, 0, GI), "lim": (100_000, 0, 16 * GI), "count": 1, "qos": "medium", "local": True,
                 "iso": "soft", "workload": "test-workload", "changes": {keys.ISOLATION: "soft"},
                 "unchanged": (keys.TFLOPS_REQUEST, keys.VRAM_REQUEST)}),
    Case("C2", a_pod({"gpupool": "mock", "inject-container": "main", "isolation": "partitioned",
                      "partition-id": "1g.10gb", "gpu-model": "A100"}),
         expect={"req": (0, 0, 0), "lim": (0, 0, 0), "partition": "1g.10gb", "models": ("A100",)}),
    Case("C3", a_pod({"gpupool": "mock", "inject-container": "main", "isolation": "partitioned", "gpu-model": "A100"}),
         error="tflops request is not set", error_field=keys.TFLOPS_REQUEST),
    Case("C4", a_pod({"gpupool": "mock", "workload-profile": "test-profile-handle", "inject-container": "main"},
                     owner=("Deployment", "test-workload")),
         profile=a_profile({"poolName": "mock", **PROFILE_RES}, name="test-profile-handle"),
         expect={"workload": "test-workload", "changes": {keys.TFLOPS_REQUEST: "10", keys.VRAM_REQUEST: "1Gi",
                 keys.TFLOPS_LIMIT: "100", keys.VRAM_LIMIT: "16Gi", keys.GPU_COUNT: "1"}}),
    Case("C5", a_pod({"gpupool": "mock", "inject-container": "main", "is-local-gpu": "true", "isolation": "soft",
                      **TF}),
         expect={"req": FULL[0], "lim": FULL[1], "qos": "high", "local": True,
                 "attrs": {keys.SIDECAR_WORKER: "false", keys.EMBEDDED_WORKER: "true"}}),
    Case("C6", a_pod({"gpupool": "mock", "is-local-gpu": "true", "isolation": "hard", **TF}),
         expect={"iso": "hard", "attrs": {keys.SIDECAR_WORKER: "true"}, "no_attrs": (keys.EMBEDDED_WORKER,)}),
    Case("C7", a_pod({"gpupool": "mock", "is-local-gpu": "true", "isolation": "shared", **TF}),
         expect={"iso": "shared", "attrs": {keys.SIDECAR_WORKER: "false"}}),
    Case("C8", a_pod({"gpupool": "mock", "is-local-gpu": "true", "isolation": "hard", "sidecar-worker": "true", **TF}),
         expect={"local": True, "attrs": {keys.SIDECAR_WORKER: "true"}}),
    Case("C9", a_pod({"gpupool": "mock", "is-local-gpu": "false", **TF}),
         expect={"local": False, "attrs": {keys.SIDECAR_WORKER: "false"}, "no_attrs": (keys.EMBEDDED_WORKER,)}),
    Case("C11", a_pod({"dedicated-gpu": "true", "gpu-model": "A100", "gpupool": "mock"}), context=A100,
         expect={"req": (312_000, 0, 40 * GI), "lim": (312_000, 0, 40 * GI), "qos": "high",
                 "changes": {keys.TFLOPS_REQUEST: "312", keys.VRAM_LIMIT: "40Gi"}}),
    Case("C12", a_pod({**TF, "gpupool": "mock"}, containers=[("main", {"nvidia.com/gpu": "3"})]),
         expect={"req": FULL[0], "lim": FULL[1], "count": 3, "qos": "high", "vendor": "NVIDIA",
                 "changes": {keys.TFLOPS_REQUEST: "100", keys.VRAM_REQUEST: "16Gi", keys.GPU_COUNT: "3"},
                 "attrs": {keys.CONTAINER_GPU_COUNT: '{"main":3}'}}),
    Case("C13", a_pod({"gpupool": "mock"}, containers=[("main", {"nvidia.com/gpu": 3})]),
         expect={"req": (0, 100_000, 0), "lim": (0, 100_000, 0), "count": 3, "qos": "medium",
                 "changes": {keys.PERCENT_REQUEST: "100", keys.GPU_COUNT: "3"}}),
    Case("C14", a_pod({**TF, "gpu-count": "2", "gpupool": "mock"}, containers=[("main", {"nvidia.com/gpu": "3"})]),
         expect={"count": 2, "unchanged": (keys.GPU_COUNT,), "no_attrs": (keys.CONTAINER_GPU_COUNT,),
                 "not_written": (keys.PERCENT_REQUEST, keys.PERCENT_LIMIT)}),
    Case("C16", a_pod({"gpupool": "mock", "workload-profile": "local-gpu-profile", "inject-container": "main"}),
         profile=a_profile({"isLocalGPU": True, **PROFILE_RES}), expect={"local": True,
                                                                         "changes": {keys.TFLOPS_LIMIT: "100"}}),
    Case("C17", a_pod({"workload-profile": "p", "enabled-replicas": "1"}, owner=("ReplicaSet", "test-rs"),
                      labels={"pod-template-hash": "test-hash"}), profile=a_profile(PROFILE_RES),
         expect={"attrs": {keys.ENABLED_REPLICAS: "1"}, "workload": "test-rs"}),
    Case("C18", a_pod({"workload-profile": "p", "tflops-request": "20", "inject-container": "test-container",
                       "enabled-replicas": "3", "qos": "high"}), profile=a_profile({"poolName": "mock", **PROFILE_RES}),
         expect={"pool": "mock", "req": (20_000, 0, GI), "lim": (100_000, 0, 16 * GI), "qos": "high",
                 "attrs": {keys.INJECT_CONTAINER: "test-container", keys.ENABLED_REPLICAS: "3"}}),
    Case("C19", a_pod({"gpupool": "mock", "enabled-replicas": "3", "gang-enabled": "true", **TF}, name="", uid=""),
         context=ComposeContext(review_uid="abcdef12-3456"),
         expect={"attrs": {keys.GANG_DESIRED: "3", keys.GANG_REQUIRED: "3", keys.GANG_GROUP_KEY: "default/-abcdef12"}}),
    Case("C20", a_pod({"enabled-replicas": "3", "gang-min-members": "2", **TF}),
         expect={"no_attrs": (keys.GANG_DESIRED, keys.GANG_REQUIRED, keys.GANG_GROUP_KEY)}),
    Case("C21", a_pod({"enabled-replicas": "3", "gang-enabled": "true", "gang-min-members": "1", **TF}),
         error=f"invalid {keys.GANG_MIN_MEMBERS}=1: explicit gang minMembers must be >= 2"),
    Case("C22", a_pod({"enabled-replicas": "3", "gang-enabled": "true", "gang-min-members": "abc", **TF}),
         error=f'invalid {keys.GANG_MIN_MEMBERS} value "abc": not a whole number',
         error_field=keys.GANG_MIN_MEMBERS),
    Case("C23", a_pod({"enabled-replicas": "2", "gang-enabled": "true", "gang-min-members": "3", **TF}),
         error=f"invalid {keys.GANG_MIN_MEMBERS}=3: exceeds desired replicas 2"),
    Case("C24", a_pod({"enabled-replicas": "1", "gang-enabled": "true", **TF}),
         error=f"invalid {keys.GANG_ENABLED}=true: gang scheduling requires at least 2 replicas, got 1"),
    Case("C25", a_pod({"enabled-replicas": "3", "gang-enabled": "true", "gang-timeout": "not-a-duration", **TF}),
         error=f'invalid {keys.GANG_TIMEOUT} value "not-a-duration": not a duration (e.g. "30s", "5m", "1h30m")'),
    Case("C26", a_pod({"gang-enabled": "true", **TF}, name="no-replica-source"),
         error=f"invalid {keys.GANG_ENABLED}=true: cannot determine gang size — set {keys.GANG_MIN_MEMBERS}"
               " or spec.replicas on the workload"),
    Case("C27", a_pod(TF, name="", uid="9f8e7d6c-5b4a", generate_name="test-name"),
         expect={"workload_prefix": "test-name-"}),
    Case("C28", a_pod(TF, owner=("ReplicaSet", "test-rs")), expect={"workload": "test-rs"}),
    Case("C29", a_pod(TF, owner=("ReplicaSet", "test-rs")), context=ComposeContext(owner_name="test-deployment"),
         expect={"workload": "test-deployment"}),
    Case("C29-hash", a_pod(TF, owner=("ReplicaSet", "web-5d9c7"), labels={"pod-template-hash": "5d9c7"}),
         expect={"workload": "web"}),
    Case("C30", a_pod(TF, name="", uid="0123456789", generate_name="test-name"),
         expect={"workload_prefix": "test-name-"}),
    Case("C31", a_pod(TF, containers=[("container1", {"nvidia.com/gpu": "2"}), ("container2", {"nvidia.com/gpu": "1"}),
                                      ("container3", {"nvidia.com/gpu": "1"})]),
         expect={"count": 4, "changes": {keys.GPU_COUNT: "4"}, "attrs": {
             keys.INJECT_CONTAINER: "container1,container2,container3",
             keys.CONTAINER_GPU_COUNT: '{"container1":2,"container2":1,"container3":1}'}}),
    Case("C31-own-split", a_pod({**TF, "gpu-count": "3", "inject-container": "b,a",
                                 "container-gpu-count": '{"b": 2, "a": 1}'}, containers=[("a", {}), ("b", {})]),
         expect={"count": 3, "attrs": {keys.INJECT_CONTAINER: "b,a", keys.CONTAINER_GPU_COUNT: '{"b": 2, "a": 1}'}}),
    Case("C32b", a_pod({"isolation": "shared"}, containers=[("main", {"nvidia.com/gpu": "2"})]),
         expect={"count": 2, "req": (0, 0, 0), "lim": (0, 0, 0), "attrs": {keys.CONTAINER_GPU_COUNT: '{"main":2}'}}),
] + [
    Case(f"C32c-{iso}-{local}-{sidecar}", a_pod({"isolation": iso, "is-local-gpu": local, "sidecar-worker": sidecar,
                                                **TF}), expect={"iso": iso})
    for iso, local, sidecar in (("hard", "false", "false"), ("hard", "true", "false"), ("hard", "true", "true"),
                                ("soft", "true", "false"))
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_spec_case(case: Case) -> None:
    check(case)
