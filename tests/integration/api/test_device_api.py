"""The device plan in the read model: a pool's ``enforcement`` set through the API shows in what
``simulate`` and the allocation document say the pod gets (docs/runtime.md)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from events import intents
from events.values import GpuSpec, QuotaSpec, Resources
from services.cli import output

from .conftest import Api, pod

pytestmark = pytest.mark.integration
UUIDS = ("gpu-59a083e2-169d-67e4-4a54-c593d39c54de", "gpu-59a083e2-169d-67e4-4a54-c593d39c54d1")


def _node() -> intents.RegisterNode:
    gpus = tuple(GpuSpec(name=f"n1-gpu{i}", capacity=Resources(milli_tflops=100_000, vram_bytes=16 * 2**30),
                         model="H100", index=i, uuid=uuid) for i, uuid in enumerate(UUIDS))
    return intents.RegisterNode(intent_id="register-n1", node="n1", pool="default", gpus=gpus)


async def test_simulate_and_the_allocation_show_the_devices_and_limits_the_pod_gets(api: Api) -> None:
    await api.publish(_node())
    status, bad = await api.send("PUT", "/api/v1/pools/default", {"enforcement": "hami"})
    assert status == 400 and bad["field"] == "enforcement" and "hami-core" in bad["error"]
    status, configured = await api.send("PUT", "/api/v1/pools/default", {"enforcement": "hami-core"})
    assert status == 200 and configured["type"] == "pool_configured", configured
    assert (await api.get("/api/v1/pools"))[1]["items"][0]["config"]["enforcement"] == "hami-core"

    status, simulated = await api.send("POST", "/api/v1/simulate", pod("p1", tflops="25", vram="3Gi"))
    assert status == 200, simulated
    device = simulated["device"]
    assert device["enforcement"] == "hami-core" and device["runtime_class"] == "nvidia"
    (group,) = device["containers"]
    granted = simulated["outcome"]["gpus"]
    assert group["devices"] == ["GPU-" + UUIDS[int(granted[0][-1])][4:]]
    assert group["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3072m" and group["env"]["CUDA_DEVICE_SM_LIMIT"] == "25"
    assert any("CUDA_DEVICE_MEMORY_LIMIT_0=3072m" in line for line in output.device_lines(device))

    status, submitted = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="25", vram="3Gi"))
    assert status == 200 and submitted["type"] == "allocation_granted", submitted
    _, doc = await api.get(f"/api/v1/allocations/{quote(submitted['allocation_id'], safe='')}")
    assert doc["device"]["containers"][0]["devices"] == ["GPU-" + UUIDS[int(doc["gpus"][0][-1])][4:]]
    assert doc["device"]["containers"][0]["env"]["NVIDIA_VISIBLE_DEVICES"] == doc["device"]["containers"][0][
        "devices"][0]
    listed = (await api.get("/api/v1/allocations", pod="p1"))[1]["items"]
    assert listed[0]["device"] == doc["device"]


async def test_simulate_and_submit_compose_with_the_clusters_facts_as_the_webhook_does(api: Api) -> None:
    """``dedicated-gpu`` takes the model's whole capacity from the projection's GPUs, and a Pod that
    leaves TFLOPS/VRAM unset takes its namespace quota's defaults (services/admission/view.py)."""
    await api.publish(_node())
    dedicated = pod("whole", tflops="", vram="")
    dedicated["metadata"]["annotations"] = {"tensor-fusion.ai/dedicated-gpu": "true",
                                            "tensor-fusion.ai/gpu-model": "H100"}
    status, simulated = await api.send("POST", "/api/v1/simulate", dedicated)
    assert status == 200, simulated
    assert simulated["allocation_request"]["request"] == {"tflops": "100", "vram": "16Gi"}, simulated
    status, submitted = await api.send("POST", "/api/v1/allocations", dedicated)
    assert status == 200 and submitted["type"] == "allocation_granted", submitted
    unknown = {**dedicated["metadata"]["annotations"], "tensor-fusion.ai/gpu-model": "B200"}
    status, refused = await api.send("POST", "/api/v1/simulate", {**dedicated, "metadata": {
        **dedicated["metadata"], "annotations": unknown}})
    assert status == 400 and refused["field"] == "tensor-fusion.ai/gpu-model", refused
    assert "(known models: H100)" in refused["error"], refused
    await api.publish(intents.SetQuota(intent_id="quota-team-b", namespace="team-b", spec=QuotaSpec(
        default_requests=Resources(milli_tflops=7_000, vram_bytes=2**30))))
    bare = pod("bare", namespace="team-b")
    bare["metadata"]["annotations"] = {}
    status, simulated = await api.send("POST", "/api/v1/simulate", bare)
    assert status == 200 and simulated["allocation_request"]["request"] == {"tflops": "7", "vram": "1Gi"}, simulated


async def test_a_pod_naming_an_unknown_pool_is_refused_naming_the_known_ones(api: Api) -> None:
    """As the webhook refuses it (services/podspec/options.py): 400 naming the pool annotation and
    the pools the reader knows, for simulate and submit alike; with no pool known yet, nothing is
    checked (the decision answers)."""
    elsewhere = pod("p1", tflops="10", vram="1Gi")
    elsewhere["metadata"]["annotations"]["tensor-fusion.ai/gpupool"] = "defualt"
    status, answer = await api.send("POST", "/api/v1/simulate", elsewhere)
    assert status == 200 and answer["outcome"]["type"] == "allocation_rejected", answer  # nothing known yet
    await api.publish(_node())
    for route in ("/api/v1/simulate", "/api/v1/allocations"):
        status, refused = await api.send("POST", route, elsewhere)
        assert status == 400 and refused["field"] == "tensor-fusion.ai/gpupool", refused
        assert "'defualt': gpu pool not found (known pools: default)" in refused["error"], refused
    assert (await api.get("/api/v1/allocations", pod="p1"))[1]["items"] == []
