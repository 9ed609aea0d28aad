"""The aiohttp handler over plain HTTP (aiohttp test server): odd bodies, versions, publish failures."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from events.intents import RequestAllocation
from services.admission.view import ClusterView
from services.admission.webhook import build_app
from tests.unit.admission.builders import MOCK_POOL, a_pod, a_review


async def _client(publish: Any, **kw: Any) -> TestClient:
    client = TestClient(TestServer(build_app(view=ClusterView(pool=MOCK_POOL), publish=publish, **kw)))
    await client.start_server()
    return client


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'{"request": 5}', b'{"request": {"object": 7}}',
                                  b'{"apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "u"}}'])
async def test_odd_bodies_get_a_200_admission_review(body: bytes) -> None:
    published: list[Any] = []

    async def publish(intent: Any) -> None:
        published.append(intent)

    client = await _client(publish)
    try:
        response = await client.post("/mutate-v1-pod", data=body)
        assert response.status == 200
        review = msgspec.json.decode(await response.read())
        assert review["kind"] == "AdmissionReview" and review["response"]["status"]["message"]
    finally:
        await client.close()
    assert published == []


async def test_v1beta1_is_answered_in_v1beta1_and_intent_is_published() -> None:
    published: list[RequestAllocation] = []

    async def publish(intent: RequestAllocation) -> None:
        published.append(intent)

    body = msgspec.json.decode(a_review(a_pod({"tflops-request": "2"}, uid="pod-uid")))
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    client = await _client(publish)
    try:
        review = await (await client.post("/mutate-v1-pod", data=msgspec.json.encode(body))).json()
    finally:
        await client.close()
    assert review["apiVersion"] == "admission.k8s.io/v1beta1" and review["response"]["allowed"]
    assert [(i.intent_id, i.spec.allocation_id, i.spec.request.milli_tflops) for i in published] == [
        ("admit-pod-uid", "pod-uid", 2000)]


async def test_publish_that_hangs_is_denied_after_the_timeout() -> None:
    async def publish(_: Any) -> None:
        import asyncio

        await asyncio.Event().wait()

    client = await _client(publish, publish_timeout_s=0.05)
    try:
        review = await (await client.post("/mutate-v1-pod", data=a_review(a_pod({"tflops-request": "1"})))).json()
    finally:
        await client.close()
    assert review["response"]["allowed"] is False and review["response"]["status"]["code"] == 503
