"""The PriorityClass watch (scheduling.k8s.io/v1) feeding the webhook's view, against the in-test API server."""

from __future__ import annotations

import asyncio

import pytest

from services.admission.review import review
from services.admission.view import ClusterView
from services.admission.watches import watch_priority_classes
from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer
from tests.unit.admission.builders import MOCK_POOL, a_pod, a_review

from .test_binder_and_watches import _stop, _until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _priority_class(name: str, value: int) -> dict[str, object]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "preemptionPolicy": "PreemptLowerPriority"}


async def test_a_pod_naming_an_unresolved_class_gets_the_watched_value(kube_api: KubeApiServer) -> None:
    kube_api.create("priorityclasses", _priority_class("batch-high", 7000))
    view = ClusterView(pool=MOCK_POOL)
    pod = a_pod({"tflops-request": "1", "vram-request": "1Gi"}, priorityClassName="batch-high")
    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(watch_priority_classes(api, view=view))
        try:
            await _until(lambda: view.priority_classes == {"batch-high": 7000})
            verdict = review(a_review(pod), view=view)
            assert verdict.spec is not None and verdict.spec.priority == 7000
            kube_api.create("priorityclasses", _priority_class("system-critical", 2_000_000_000))
            kube_api.delete("priorityclasses", "batch-high")
            await _until(lambda: view.priority_classes == {"system-critical": 2_000_000_000})
        finally:
            await _stop(task)
    verdict = review(a_review(pod), view=view)
    assert verdict.spec is not None and verdict.spec.priority is None  # unknown class: the QoS decides
