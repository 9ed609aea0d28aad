"""The binder acts for an allocation only on the pod the webhook admitted for it: a pod of the same
namespace wearing its ``gpuledger.io/allocation-id`` label, without ``tensor-fusion.ai/enabled: "true"``
or under another name, gets neither its GPUs nor, when deleted, its release (the real webhook, an
allocator replica and the binder against the in-test API server, over a real nats-server)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import jsonpatch
import msgspec
import pytest
import structlog
from nats.js import JetStreamContext

from events import decisions
from services.admission.binder import Binder
from services.admission.view import ClusterView
from services.podspec import keys
from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.harness import until
from tests.unit.admission.builders import a_pod, a_review

from .test_binder_and_watches import NOW, _emit, _gated_pod, _publisher, _released, _spec, _stop, _until
from .test_preemption_e2e import _gpu_ids, _stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _gated(kube_api: KubeApiServer, name: str) -> bool:
    pod = kube_api.get("pods", name, namespace="default") or {}
    return {"name": keys.SCHEDULING_GATE} in pod.get("spec", {}).get("schedulingGates", [])


def _refusals(logs: list[dict[str, Any]]) -> dict[str, str]:
    return {str(e["pod"]): str(e["reason"]) for e in logs if e.get("event") == "pod_claim_refused"}


async def test_a_pod_wearing_an_admitted_pods_allocation_id_is_neither_bound_nor_released(
        kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
        start_webhook: Callable[..., Any]) -> None:
    with structlog.testing.capture_logs() as logs:
        async with _stack(kube_api, jetstream, nats_url, start_webhook, gpus=2) as (webhook, store):
            # a controller-made pod: unnamed at admission, so its allocation records its generateName
            pod = a_pod({"tflops-request": "80", "vram-request": "8Gi"}, name="", uid="", generate_name="train-7d9f-")
            answer = (await webhook.post(a_review(pod, uid="review-train")))["response"]
            assert answer["allowed"], answer
            admitted = kube_api.create("pods", jsonpatch.apply_patch(
                pod, msgspec.json.decode(base64.b64decode(answer["patch"]))), namespace="default")
            owner = admitted["metadata"]["name"]
            allocation_id = admitted["metadata"]["labels"][keys.ALLOCATION_ID_LABEL]
            await until(lambda: bool(_gpu_ids(kube_api, owner)) and not _gated(kube_api, owner),
                        what="the admitted pod bound")
            squatters = {  # created past the webhook, as a cluster without deploy/runtime/device-policy.yaml allows
                "train-7d9f-plain": {"generateName": "train-7d9f-"},  # no tensor-fusion.ai/enabled label
                "other": {"labels": {keys.ENABLED: "true"}},  # another name
                "train-7d9f-x": {"labels": {keys.ENABLED: "true"}, "generateName": "train-"},  # another generateName
            }
            for name, extra in squatters.items():
                squatter = _gated_pod(name, allocation_id)
                squatter["metadata"]["labels"] = {keys.ALLOCATION_ID_LABEL: allocation_id, **extra.get("labels", {})}
                if "generateName" in extra:
                    squatter["metadata"]["generateName"] = extra["generateName"]
                kube_api.create("pods", squatter, namespace="default")
            await until(lambda: set(_refusals(logs)) == set(squatters), what="every squatter refused")
            for name in squatters:
                assert _gated(kube_api, name) and not _gpu_ids(kube_api, name), name
                kube_api.delete("pods", name, namespace="default")
            await asyncio.sleep(0.5)  # a release for a squatter's deletion would be published by now
            assert not _gated(kube_api, owner) and _gpu_ids(kube_api, owner) == "node-1-gpu0"
            assert f"release-{allocation_id}" not in store.intents
    reasons = _refusals(logs)
    assert reasons["train-7d9f-plain"] == ('not labelled tensor-fusion.ai/enabled: "true", so gpuledger\'s webhook '
                                          "did not admit it")
    assert reasons["other"] == reasons["train-7d9f-x"] == "the allocation belongs to pod 'train-7d9f-'"
    assert all(e["allocation_id"] == allocation_id for e in logs if e.get("event") == "pod_claim_refused")


async def test_a_pod_seen_before_the_grant_is_bound_only_if_it_is_the_allocations_pod(
        kube_api: KubeApiServer, jetstream: JetStreamContext) -> None:
    with structlog.testing.capture_logs() as logs:
        async with await kube.api_client(url=kube_api.url) as api:
            binder = Binder(api, publish=_publisher(jetstream), view=ClusterView(), orphan_grace_s=3600)
            task = asyncio.create_task(binder.run(jetstream))
            try:
                await _until(lambda: binder.pods_synced.is_set() and binder.events_synced.is_set())
                kube_api.create("pods", _gated_pod("squat", "a-1"), namespace="default")
                await _until(lambda: "a-1" in binder.pods)  # not known yet: its grant has not arrived
                await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=_spec("a-1", "owner"), node="node-1",
                                                                   gpus=("gpu-1",), charges=()))
                await _until(lambda: "a-1" in binder.book.granted and "a-1" not in binder.pods)
                kube_api.create("pods", _gated_pod("owner", "a-1"), namespace="default")
                await _until(lambda: not _gated(kube_api, "owner"))
                assert _gated(kube_api, "squat") and not _gpu_ids(kube_api, "squat")
                kube_api.delete("pods", "squat", namespace="default")
                await asyncio.sleep(0.5)  # a release for the squatter's deletion would be published by now
            finally:
                await _stop(task)
    assert await _released(jetstream) == []
    assert _refusals(logs) == {"squat": "the allocation belongs to pod 'owner'"}
