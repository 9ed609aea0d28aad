"""deploy/runtime (the node side of device delivery, docs/runtime.md) renders, validates offline and
agrees with the code: the RuntimeClass the webhook names, the library directory the device plan
mounts, the service account the policy trusts."""

from __future__ import annotations

import pytest

from events.values import AllocationSpec, Resources
from services.podspec import device_plan
from tests.deploy.conftest import DEPLOY, Obj, render
from tests.deploy.test_manifests import NEWEST, OLDEST_SUPPORTED, _validate

RUNTIME = DEPLOY / "runtime"


@pytest.fixture(scope="module")
def runtime_objects() -> dict[str, Obj]:
    return {obj["kind"] + "/" + obj["metadata"]["name"]: obj for obj in render(RUNTIME)}


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, NEWEST])
def test_every_runtime_object_validates_offline(runtime_objects: dict[str, Obj], version: str) -> None:
    errors = [e for obj in runtime_objects.values() for e in _validate(obj, version, {})]
    assert not errors, "\n".join(errors)


def test_runtime_class_is_the_one_the_webhook_names(runtime_objects: dict[str, Obj]) -> None:
    runtime_class = runtime_objects[f"RuntimeClass/{device_plan.RUNTIME_CLASS}"]
    assert runtime_class["handler"] == "nvidia"


def test_the_daemonset_installs_what_the_device_plan_mounts(runtime_objects: dict[str, Obj]) -> None:
    daemonset = runtime_objects["DaemonSet/gpuledger-hami-core"]
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["namespace"] == "gpuledger-node"
    assert pod["nodeSelector"] == {"gpuledger.io/enforcement": "hami-core"}
    assert {v["hostPath"]["path"] for v in pod["volumes"]} == {device_plan.HAMI_LIBRARY_DIR}
    (install,) = pod["initContainers"]
    script = install["command"][-1]
    assert f"mv -f {device_plan.HAMI_LIBRARY_DIR}/.libvgpu.so.new {device_plan.HAMI_LIBRARY}" in script
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="p", request=Resources(), limit=Resources())
    plan = device_plan.device_plan(spec, enforcement="hami-core")
    assert {v["hostPath"]["path"] for v in plan.volumes if "hostPath" in v} == {device_plan.HAMI_LIBRARY_DIR}
    assert {v["hostPath"]["type"] for v in plan.volumes if "hostPath" in v} == {"Directory"}  # absent: pod fails
    preload = next(m for m in plan.containers[0].mounts if m["mountPath"] == "/etc/ld.so.preload")
    assert preload["subPath"] == "ld.so.preload" and f"{device_plan.HAMI_LIBRARY_DIR}/ld.so.preload" in script


def test_the_policy_trusts_the_binders_service_account(runtime_objects: dict[str, Obj]) -> None:
    admission = {o["kind"] + "/" + o["metadata"]["name"]: o for o in render(DEPLOY / "overlays" / "prod")}
    deployment = admission["Deployment/gpuledger-admission"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    policy = runtime_objects["ValidatingAdmissionPolicy/gpuledger-device-selection"]
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert f"system:serviceaccount:{namespace}:{account}" in expressions
    binding = runtime_objects["ValidatingAdmissionPolicyBinding/gpuledger-device-selection"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
