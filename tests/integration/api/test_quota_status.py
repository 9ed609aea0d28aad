"""GPUResourceQuota status end to end: the quota watch publishes SetQuota to a real allocator
(PostgreSQL + NATS), grants count against it, the status writer copies the allocator's quota status
into the object in the in-test Kubernetes API server, and /metrics exports it."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import pytest

from events import intents
from services.admission import quota_sync
from services.admission.view import ClusterView
from services.admission.watches import QuotaTracker, watch_quotas
from services.shared import kube, messaging
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.factory import register_node, request
from tests.integration.service.harness import until

from .conftest import Api
from .test_metrics import scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
QUOTA = {"metadata": {"name": "q", "namespace": "team-a"},
         "spec": {"total": {"requests": {"tflops": "100"}, "maxWorkers": 4, "alertThresholdPercent": 50}}}


def _status(kube_api: KubeApiServer) -> dict:  # type: ignore[type-arg]
    return (kube_api.get("gpuresourcequotas", "q", namespace="team-a") or {}).get("status") or {}


async def test_status_follows_the_allocators_usage(api: Api, kube_api: KubeApiServer) -> None:
    await api.publish(register_node("n1", gpus=2))
    tracker = QuotaTracker(ClusterView())

    async def publish(intent: intents.AnyIntent) -> int:
        return await messaging.publish_intent(api.js, intent)

    async with await kube.api_client(url=kube_api.url) as k8s:
        watch = asyncio.create_task(watch_quotas(k8s, view=tracker.view, publish=publish, tracker=tracker))
        try:
            kube_api.create("gpuresourcequotas", QUOTA, namespace="team-a")
            await until(lambda: "team-a" in api.replica.allocator.state.quotas, what="the quota in the allocator")
            fetch = quota_sync.api_reader(api.session, api.base)
            await api.publish(request("a", tflops=60))
            at = datetime(2026, 1, 1, tzinfo=UTC)
            assert await quota_sync.sync_once(k8s, tracker=tracker, fetch=fetch, now=at) == 1
            status = _status(kube_api)
            assert status["used"] == {"requests": {"tflops": "60", "vram": "1Gi"},
                                      "limits": {"tflops": "60", "vram": "1Gi"}, "workers": 1}
            assert status["availablePercent"] == {"requests.tflops": "40.00", "requests.vram": "100",
                                                  "limits.tflops": "100", "limits.vram": "100", "workers": "75.00"}
            [ready] = status["conditions"]
            assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "AlertThresholdReached")
            assert "tflops requests: true" in ready["message"] and ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"
            await until(lambda: tracker.objects["team-a"]["q"].get("status") == status, what="the watch")
            assert await quota_sync.sync_once(k8s, tracker=tracker, fetch=fetch) == 0  # nothing changed

            seen = await scrape(api)
            ns = ("namespace", "team-a")
            assert seen[("gpuledger_quota_available_percent", (ns, ("resource", "requests.tflops")))] == 40.0
            assert seen[("gpuledger_quota_alert", (ns,))] == 1.0
            assert seen[("gpuledger_quota_used_tflops", (ns, ("side", "requests")))] == 60.0
            assert seen[("gpuledger_quota_workers", (ns,))] == 1.0

            status_code, _ = await api.send("DELETE", "/api/v1/allocations/a", wait=10)
            assert status_code == 200
            later = datetime(2026, 1, 2, tzinfo=UTC)
            assert await quota_sync.sync_once(k8s, tracker=tracker, fetch=fetch, now=later) == 1
            [ready] = _status(kube_api)["conditions"]
            assert (ready["status"], ready["reason"]) == ("True", "CapacitySufficient")
            assert ready["lastTransitionTime"] == "2026-01-02T00:00:00Z"
            assert _status(kube_api)["availablePercent"]["requests.tflops"] == "100.00"
            assert (await scrape(api))[("gpuledger_quota_alert", (ns,))] == 0.0
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
