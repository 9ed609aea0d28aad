"""Real AdmissionReview JSON over verified HTTPS against the running webhook, publishing to real NATS."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
from typing import Any

import jsonpatch
import msgspec
import pytest
from nats.js import JetStreamContext

from events import codec, intents, subjects
from services.admission.webhook import intent_id
from services.podspec import keys
from tests.unit.admission.builders import a_pod, a_review

pytestmark = pytest.mark.integration


async def _intents(js: JetStreamContext) -> list[intents.AnyIntent]:
    info = await js.stream_info(subjects.INTENT_STREAM)
    out = []
    for seq in range(1, info.state.last_seq + 1):
        msg = await js.get_msg(subjects.INTENT_STREAM, seq)
        out.append(codec.decode_intent(msg.data))
    return out


def _patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    ops = msgspec.json.decode(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
    return result


async def test_labelled_pod_is_patched_gated_and_published_once(start_webhook, nats_publish, jetstream) -> None:
    webhook = await start_webhook(nats_publish)
    pod = a_pod({"tflops-request": "0.5", "vram-limit": "1024Mi", "gpupool": "mock"}, uid="")
    body = a_review(pod, uid="review-uid-1")
    first = (await webhook.post(body))["response"]
    again = (await webhook.post(body))["response"]  # the API server retrying the same review
    assert first["allowed"] and first["uid"] == "review-uid-1" and first["patchType"] == "JSONPatch"
    assert again["allowed"] and again["patch"] == first["patch"]
    admitted = _patched(pod, first)
    annotations = admitted["metadata"]["annotations"]
    assert annotations[keys.TFLOPS_REQUEST] == "500m" and annotations[keys.VRAM_LIMIT] == "1Gi"
    assert annotations[keys.VRAM_REQUEST] == "1Gi" and annotations[keys.QOS] == "medium"
    assert admitted["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
    assert admitted["metadata"]["labels"][keys.ALLOCATION_ID_LABEL] == "review-uid-1"
    published = await _intents(jetstream)
    assert len(published) == 1  # JetStream dropped the retry's duplicate
    request = published[0]
    assert isinstance(request, intents.RequestAllocation) and request.intent_id == intent_id("review-uid-1")
    assert request.spec.allocation_id == "review-uid-1" and request.spec.request.milli_tflops == 500


async def test_dry_run_is_answered_but_publishes_nothing(start_webhook, nats_publish, jetstream) -> None:
    webhook = await start_webhook(nats_publish)
    response = (await webhook.post(a_review(a_pod({"tflops-request": "1"}), dry_run=True)))["response"]
    assert response["allowed"] and response["patch"]
    assert await _intents(jetstream) == []


async def test_bad_annotation_is_denied_naming_key_and_value(start_webhook, nats_publish, jetstream) -> None:
    webhook = await start_webhook(nats_publish)
    response = (await webhook.post(a_review(a_pod({"tflops-request": "ten"}))))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert keys.TFLOPS_REQUEST in response["status"]["message"] and "'ten'" in response["status"]["message"]
    assert "patch" not in response and await _intents(jetstream) == []


@pytest.mark.parametrize("policy", ["deny", "ignore"])
async def test_nats_outage_follows_the_failure_policy(start_webhook, nats_server, policy) -> None:
    from services.shared import messaging

    client = await messaging.connect(nats_server.url, name="outage-test")
    js = client.jetstream()
    await messaging.ensure_streams(js)

    async def publish(intent: Any) -> int:
        return await messaging.publish_intent(js, intent, timeout=0.5)

    webhook = await start_webhook(publish, failure_policy=policy)
    nats_server.stop()
    try:
        response = (await webhook.post(a_review(a_pod({"tflops-request": "1"}))))["response"]
    finally:
        with contextlib.suppress(OSError, TimeoutError):  # the server is gone: closing may fail
            await asyncio.wait_for(client.close(), 2)
    if policy == "deny":
        assert response["allowed"] is False and response["status"]["code"] == 503
        assert "message bus is unavailable" in response["status"]["message"]
    else:
        assert response["allowed"] is True and "patch" not in response
        assert "failurePolicy=ignore" in response["status"]["message"]
