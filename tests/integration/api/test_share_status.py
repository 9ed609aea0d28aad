"""GPUShare status end to end: the share watch publishes SetShare to a real allocator (PostgreSQL +
NATS), grants count against the share, and the status writer copies the reader's share figures into
the objects of the in-test Kubernetes API server (a refused GPUShare is not Ready)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from events import intents
from services.admission import share_status
from services.admission.watches import ShareTracker, watch_shares
from services.shared import kube, messaging
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.factory import register_node, request
from tests.integration.service.harness import until

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
GUARANTEE = {"tflops": "100", "vram": "16Gi", "gpus": 2}


def _gpushare(name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "gpuledger.io/v1", "kind": "GPUShare", "metadata": {"name": name}, "spec": spec}


def _status(kube_api: KubeApiServer, name: str) -> dict:  # type: ignore[type-arg]
    return (kube_api.get("gpushares", name) or {}).get("status") or {}


async def test_status_follows_the_allocators_share_figures(api: Api, kube_api: KubeApiServer) -> None:
    await api.publish(register_node("n1", gpus=4))
    tracker = ShareTracker()

    async def publish(intent: intents.AnyIntent) -> int:
        return await messaging.publish_intent(api.js, intent)

    async with await kube.api_client(url=kube_api.url) as k8s:
        watch = asyncio.create_task(watch_shares(k8s, publish=publish, tracker=tracker))
        try:
            kube_api.create("gpushares", _gpushare("train", namespaces=["team-a"], pools=[
                {"pool": "default", "guaranteed": GUARANTEE, "borrowingLimit": {"gpus": 1}}]))
            kube_api.create("gpushares", _gpushare("twin", namespaces=["team-a"]))  # refused: team-a is train's
            await until(lambda: "train" in api.replica.allocator.state.shares, what="the share in the allocator")
            await api.publish(request("a1", tflops=50), request("a2", tflops=50), request("a3", tflops=50))
            await api.caught_up()
            fetch = share_status.api_reader(api.session, api.base)
            at = datetime(2026, 1, 1, tzinfo=UTC)
            assert await share_status.sync_once(k8s, tracker=tracker, fetch=fetch, now=at) == 2

            status = _status(kube_api, "train")
            assert status["pools"] == [{"pool": "default", "guaranteed": GUARANTEE,
                                        "used": {"tflops": "150", "vram": "3Gi", "gpus": 3},
                                        "borrowed": {"tflops": "50", "vram": "1Gi", "gpus": 1},
                                        "lent": {"tflops": "0", "vram": "0", "gpus": 0}, "standing": "Over"}]
            [ready] = status["conditions"]
            assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
                "True", "InForce", "2026-01-01T00:00:00Z")
            assert "borrowing" in ready["message"] and status["lastUpdateTime"] == "2026-01-01T00:00:00Z"
            [refused] = _status(kube_api, "twin")["conditions"]
            assert (refused["status"], refused["reason"]) == ("False", "NotInForce")
            assert _status(kube_api, "twin")["pools"] == []
            await until(lambda: tracker.present["train"].get("status") == status, what="the watch")
            assert await share_status.sync_once(k8s, tracker=tracker, fetch=fetch) == 0  # nothing changed

            # released below the guarantee: the figures and the message move, Ready's transition does not
            for allocation in ("a2", "a3"):
                code, _ = await api.send("DELETE", f"/api/v1/allocations/{allocation}", wait=10)
                assert code == 200
            later = datetime(2026, 1, 2, tzinfo=UTC)
            assert await share_status.sync_once(k8s, tracker=tracker, fetch=fetch, now=later) == 1
            status = _status(kube_api, "train")
            assert status["pools"][0]["used"]["gpus"] == 1 and status["pools"][0]["standing"] == "Below"
            [ready] = status["conditions"]
            assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-01-01T00:00:00Z")
            assert "below its guarantee in default" in ready["message"]
            assert status["lastUpdateTime"] == "2026-01-02T00:00:00Z"

            # the API server's answers: 404 skips the object, another error ends the round
            kube_api.delete("gpushares", "twin")
            kube_api.create("gpushares", _gpushare("spare"))
            await until(lambda: "spare" in tracker.present and "twin" not in tracker.present, what="the watch")
            kube_api.fail_next("PATCH", "gpushares/spare", status=404)
            assert await share_status.sync_once(k8s, tracker=tracker, fetch=fetch) == 0
            kube_api.fail_next("PATCH", "gpushares/spare", status=500)
            with pytest.raises(ApiException):
                await share_status.sync_once(k8s, tracker=tracker, fetch=fetch)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
