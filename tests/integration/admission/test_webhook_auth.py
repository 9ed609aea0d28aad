"""The webhook's credentials and allocation ids, with real AdmissionReview JSON over verified HTTPS
against the running webhook on real NATS (issue 28 item 4): a review without the bearer token is
refused with 401 and publishes nothing; a UID that would name another namespace's pod
(``metadata.uid: "team-b/future"``, the ``namespace/name`` id of a pod of team-b) is denied
naming the field, and nothing is published for it."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from nats.js import JetStreamContext

from events import subjects
from tests.unit.admission.builders import a_pod, a_review

pytestmark = pytest.mark.integration

GPU_POD = {"tflops-request": "10", "vram-request": "4Gi", "gpu-count": "8", "gpupool": "mock"}


def _pod(namespace: str, *, uid: str) -> dict[str, Any]:
    pod = a_pod(GPU_POD, uid=uid)
    pod["metadata"]["namespace"] = namespace
    return pod


async def _published(js: JetStreamContext) -> int:
    return int((await js.stream_info(subjects.INTENT_STREAM)).state.messages)


async def test_a_review_without_the_token_is_refused_and_publishes_nothing(
        start_webhook, nats_publish, jetstream) -> None:
    token = secrets.token_urlsafe(32)
    webhook = await start_webhook(nats_publish, token=token)
    body = a_review(_pod("victim-ns", uid=""), uid="review-1", namespace="victim-ns")
    for sent in ("", "wrong", token[:-1], f"{token}x"):
        status, answer = await webhook.send(body, token=sent)
        assert status == 401 and answer["field"] == "Authorization", (sent, status, answer)
        assert token not in str(answer)
    async with webhook.session.post(f"{webhook.url}/mutate-v1-pod", data=body,
                                    headers={"Authorization": f"Basic {token}"}) as basic:
        assert basic.status == 401
    assert await _published(jetstream) == 0
    status, answer = await webhook.send(body, token=token)
    assert status == 200 and answer["response"]["allowed"], answer
    assert await _published(jetstream) == 1


@pytest.mark.parametrize("where", ["metadata.uid", "request.uid"])
async def test_a_uid_naming_another_namespace_is_denied_naming_the_field(
        start_webhook, nats_publish, jetstream, where: str) -> None:
    webhook = await start_webhook(nats_publish, token="t0ken")
    squat = "team-b/future"  # the allocation id pod team-b/future gets when it has no UID
    pod = _pod("team-a", uid=squat if where == "metadata.uid" else "")
    body = a_review(pod, uid=squat if where == "request.uid" else "review-2", namespace="team-a")
    answer = (await webhook.post(body))["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400, answer
    assert answer["status"]["message"].startswith(f"{where}='team-b/future'"), answer
    assert await _published(jetstream) == 0
