"""End to end, decision to device: the HTTPS webhook admits a pod into a ``hami-core`` pool, the
allocator's grant reaches the binder over real NATS, the binder patches the pod in the in-test
Kubernetes API server; the pod's final spec gives each container exactly its GPUs and limits, and
a process started with that environment (benchmarks/device_check.py on the fake H100 node) sees
only its GPU and cannot allocate past its VRAM limit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import msgspec
import pytest
from nats.js import JetStreamContext

from events import codec, decisions, intents, subjects
from events.values import GpuSpec, PoolConfig, Resources
from services.admission.binder import Binder
from services.admission.view import ClusterView
from services.podspec import PoolDefaults, keys
from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer
from tests.fixtures.kubelet import container_environment
from tests.unit.admission.builders import a_review

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/fixtures/nvml_h100_80gb_hbm3.json"
H100 = json.loads(CAPTURE.read_text())["device"]
GPUS = tuple(GpuSpec(name=f"h100-{i}", capacity=Resources(milli_tflops=989_000, vram_bytes=H100["memory_total_bytes"]),
                     model="H100", index=i, uuid=(H100["uuid"] if i == 0 else f"{H100['uuid'][:-2]}{i:02x}").lower())
             for i in range(8))
IMAGE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all"}


def _pod() -> dict[str, Any]:
    annotations = {keys.TFLOPS_REQUEST: "100", keys.TFLOPS_LIMIT: "247.25", keys.VRAM_REQUEST: "10Gi",
                   keys.VRAM_LIMIT: "10Gi", keys.GPU_COUNT: "2", keys.POOL: "h100", keys.ISOLATION: "hard",
                   keys.CONTAINER_GPU_COUNT: '{"main":1,"side":1}', keys.INJECT_CONTAINER: "main,side"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train", "namespace": "default", "uid": "uid-train",
                         "labels": {keys.ENABLED: "true"}, "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "nvidia/cuda",
                                     "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
                                    {"name": "side", "image": "nvidia/cuda"},
                                    {"name": "logs", "image": "busybox"}]}}


async def _requested(js: JetStreamContext) -> intents.RequestAllocation:
    info = await js.stream_info(subjects.INTENT_STREAM)
    for seq in range(1, info.state.last_seq + 1):
        intent = codec.decode_intent((await js.get_msg(subjects.INTENT_STREAM, seq)).data)
        if isinstance(intent, intents.RequestAllocation):
            return intent
    raise AssertionError("no RequestAllocation published")


async def _emit(js: JetStreamContext, event: decisions.AnyEvent) -> None:
    await js.publish(subjects.event_subject(codec.tag_of(event)), codec.encode(event))


async def test_a_pods_final_spec_carries_exactly_its_devices_and_limits(
        kube_api: KubeApiServer, jetstream: JetStreamContext, start_webhook: Any, nats_publish: Any) -> None:
    view = ClusterView(pool=PoolDefaults(name="default"), enforcement={"h100": "hami-core"})
    webhook = await start_webhook(nats_publish, view=view)
    answer = (await webhook.post(a_review(_pod())))["response"]
    assert answer["allowed"], answer
    patch = msgspec.json.decode(__import__("base64").b64decode(answer["patch"]))
    admitted = jsonpatch.apply_patch(_pod(), patch)
    kube_api.create("pods", admitted, namespace="default")
    stored = kube_api.get("pods", "train", namespace="default")
    spec = (await _requested(jetstream)).spec
    assert spec.attributes["gpuledger.io/enforcement"] == "hami-core"

    await _emit(jetstream, decisions.NodeRegistered(at=NOW, node="node-1", pool="h100", gpus=GPUS))
    await _emit(jetstream, decisions.PoolConfigured(at=NOW, pool="h100", config=PoolConfig(enforcement="none")))
    await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=spec, node="node-1", gpus=("h100-5", "h100-2"),
                                                       charges=()))
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=nats_publish, view=ClusterView())
        task = asyncio.create_task(binder.run(jetstream))
        try:
            async with asyncio.timeout(15):
                while {"name": keys.SCHEDULING_GATE} in (final := kube_api.get("pods", "train", namespace="default")
                                                         )["spec"].get("schedulingGates", []):
                    await asyncio.sleep(0.02)
            # a resize rewrites the limits the containers read at their next start
            bigger = Resources(milli_tflops=494_500, vram_bytes=20 * 2**30)
            await _emit(jetstream, decisions.AllocationResized(at=NOW, allocation_id=spec.allocation_id,
                                                               namespace="default", pool="h100", request=bigger,
                                                               limit=bigger, charges=()))
            async with asyncio.timeout(15):
                while container_environment(resized := kube_api.get("pods", "train", namespace="default"), "main"
                                            ).get("CUDA_DEVICE_MEMORY_LIMIT_0") != "20480m":
                    await asyncio.sleep(0.02)
            assert container_environment(resized, "side")["CUDA_DEVICE_SM_LIMIT"] == "50"
            assert container_environment(resized, "main")["NVIDIA_VISIBLE_DEVICES"] == "GPU-" + GPUS[5].uuid[4:]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    kubernetes_validate.validate(final, "1.30", strict=True)  # the pod the API server would store
    assert final["spec"]["runtimeClassName"] == "nvidia"
    assert {v["name"] for v in final["spec"]["volumes"]} >= {"gpuledger-vgpu-lib", "gpuledger-vgpu-cache"}
    # the spec is the admitted one but for what a gated pod may change (KEP-3838) and annotations
    touched = {"/".join(op["path"].split("/")[:3]) for op in jsonpatch.make_patch(stored, final)}
    touched -= {"/metadata/resourceVersion", "/metadata/generation"}  # the server's own
    assert touched <= {"/metadata/annotations", "/spec/affinity", "/spec/schedulingGates"}
    main = container_environment(final, "main", image_env=IMAGE_ENV)
    side = container_environment(final, "side", image_env=IMAGE_ENV)
    logs = container_environment(final, "logs", image_env=IMAGE_ENV)
    uuid = {g.name: "GPU-" + g.uuid[4:] for g in GPUS}
    # containers in name order take the granted GPUs in order: main h100-5, side h100-2 (container-gpus)
    assert main["NVIDIA_VISIBLE_DEVICES"] == uuid["h100-5"] and side["NVIDIA_VISIBLE_DEVICES"] == uuid["h100-2"]
    assert logs == {"NVIDIA_VISIBLE_DEVICES": "void"}
    for env in (main, side):  # the pod was admitted under hami-core: a later pool change does not matter
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m" and "CUDA_DEVICE_MEMORY_LIMIT_1" not in env
        assert env["CUDA_DEVICE_SM_LIMIT"] == "25"  # ceil(247.25 / 989 * 100)
        assert env["LD_PRELOAD"] == "/usr/local/vgpu/libvgpu.so"
    assert final["metadata"]["annotations"][keys.CONTAINER_GPUS] == '{"main":["h100-5"],"side":["h100-2"]}'

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/device_check.py"), "--fake", str(CAPTURE),
                           "--node-gpus", "8", "--expect-devices", uuid["h100-5"], "--expect-limit", str(10 * 2**30)],
                          env={**main, "PATH": os.environ.get("PATH", "")}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [d["uuid"] for d in report["devices"]] == [uuid["h100-5"]]
    assert report["devices"][0]["allocated_bytes"] == 10 * 2**30 and report["devices"][0]["refused_beyond_limit"]
