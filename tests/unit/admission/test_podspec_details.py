"""compose() details beyond the spec table: CPU/memory, node affinity, profile fields, error fields."""

from __future__ import annotations

import pytest

from events.values import NodeSelectorRequirement
from services.podspec import PodSpecError, compose, keys
from tests.unit.admission.builders import GI, MOCK_POOL, a_pod, a_profile

RES = {"tflops-request": "1"}


def test_cpu_memory_follow_the_kubernetes_effective_request_rule() -> None:
    pod = a_pod(RES)
    pod["spec"]["containers"] = [
        {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}}]
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]
    pod["spec"]["overhead"] = {"cpu": "100m", "memory": "64Mi"}
    pod["metadata"]["annotations"][keys.INJECT_CONTAINER] = "a"
    spec = compose(pod, pool_defaults=MOCK_POOL)
    assert (spec.cpu_milli, spec.memory_bytes) == (2100, GI + 512 * 2**20 + 64 * 2**20)


def test_bad_container_quantity_names_the_container_field() -> None:
    pod = a_pod(RES)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    with pytest.raises(PodSpecError) as caught:
        compose(pod, pool_defaults=MOCK_POOL)
    assert caught.value.field == "spec.containers[0].resources.requests.cpu" and caught.value.value == "lots"


@pytest.mark.parametrize(("where", "name", "value"), [
    ("containers", "cpu", "-1"), ("containers", "memory", "-1Gi"), ("initContainers", "cpu", "-500m")])
def test_a_negative_request_is_refused_not_subtracted(where: str, name: str, value: str) -> None:
    pod = a_pod(RES)
    pod["spec"]["containers"] = [{"name": "a", "resources": {"requests": {"cpu": "3", "memory": "2Gi"}}}]
    pod["spec"].setdefault(where, [{"name": "x"}])
    pod["spec"][where].append({"name": "neg", "resources": {"requests": {name: value}}})
    index = len(pod["spec"][where]) - 1
    pod["metadata"]["annotations"][keys.INJECT_CONTAINER] = "a"
    with pytest.raises(PodSpecError, match="greater than or equal to 0") as caught:
        compose(pod, pool_defaults=MOCK_POOL)
    assert caught.value.field == f"spec.{where}[{index}].resources.requests.{name}" and caught.value.value == value


def test_profile_affinity_pod_affinity_and_node_selector_are_anded() -> None:
    zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
    gpu = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    profile = a_profile({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [zone]}, "preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": gpu}]}})
    pod = a_pod({"workload-profile": "p", **RES}, nodeSelector={"disk": "ssd"},
                affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [gpu, zone]}}})
    affinity = compose(pod, profile=profile, pool_defaults=MOCK_POOL).node_affinity
    assert affinity is not None and len(affinity.required) == 2 and affinity.preferred[0].weight == 10
    disk = NodeSelectorRequirement(key="disk", operator="In", values=("ssd",))
    assert all(disk in term.match_expressions for term in affinity.required)
    assert affinity.required[0].match_expressions[0].key == "zone"


def test_profile_match_fields_are_refused_naming_the_path() -> None:
    profile = a_profile({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}})
    with pytest.raises(PodSpecError) as caught:
        compose(a_pod({"workload-profile": "p", **RES}), profile=profile, pool_defaults=MOCK_POOL)
    assert caught.value.field.startswith("WorkloadProfile.spec.nodeAffinity") and "matchFields" in caught.value.field


@pytest.mark.parametrize(("spec", "field"), [({"gpuCount": "two"}, "WorkloadProfile.spec.gpuCount"),
                                             ({"qos": "urgent"}, "WorkloadProfile.spec.qos"),
                                             ({"resources": {"limits": {"vram": "big"}}},
                                              "WorkloadProfile.spec.resources.limits.vram")])
def test_bad_profile_fields_are_named(spec: dict, field: str) -> None:
    with pytest.raises(PodSpecError) as caught:
        compose(a_pod({"workload-profile": "p", **RES}), profile=a_profile(spec), pool_defaults=MOCK_POOL)
    assert caught.value.field == field


def test_profile_model_count_and_qos_apply_below_annotations() -> None:
    profile = a_profile({"gpuModel": "H100", "gpuCount": 2, "qos": "low", "vendor": "NVIDIA",
                         "resources": {"requests": {"tflops": "5"}, "limits": {"tflops": "10"}}})
    spec = compose(a_pod({"workload-profile": "p", "qos": "high"}), profile=profile, pool_defaults=MOCK_POOL)
    assert (spec.gpu_models, spec.gpu_count, spec.qos, spec.vendor) == (("H100",), 2, "high", "NVIDIA")
    assert (spec.request.milli_tflops, spec.limit.milli_tflops) == (5000, 10_000)


def test_non_string_annotation_value_is_denied() -> None:
    pod = a_pod(RES)
    pod["metadata"]["annotations"][keys.GPU_COUNT] = 2
    with pytest.raises(PodSpecError) as caught:
        compose(pod, pool_defaults=MOCK_POOL)
    assert caught.value.field == keys.GPU_COUNT


def test_node_name_is_denied_because_the_allocation_places_the_pod() -> None:
    with pytest.raises(PodSpecError) as caught:
        compose(a_pod(RES, nodeName="gpu-7"), pool_defaults=MOCK_POOL)
    assert (caught.value.field, caught.value.value) == ("spec.nodeName", "gpu-7")


def test_pod_from_a_cronjob_manifest_carries_template_namespace_and_owner() -> None:
    from services.podspec import pod_from_manifest, workload_replicas

    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ml"},
            "spec": {"jobTemplate": {"spec": {"parallelism": 3, "template": {
                "metadata": {"labels": {keys.ENABLED: "true"}, "annotations": {keys.TFLOPS_REQUEST: "2"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}}}}
    spec = compose(pod_from_manifest(cron), pool_defaults=MOCK_POOL)
    assert (spec.namespace, spec.workload, spec.request.milli_tflops) == ("ml", "nightly", 2000)
    assert workload_replicas(cron) == 3
    with pytest.raises(PodSpecError) as caught:
        pod_from_manifest({"kind": "ConfigMap"})
    assert caught.value.field == "kind"
