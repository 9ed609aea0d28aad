"""POST /api/v1/allocations cannot claim another namespace's allocation id (issue 28 item 4): a
``metadata.uid`` shaped like ``namespace/name`` is refused with 400 naming the field, before any
intent is published, and the victim pod later gets its own id."""

from __future__ import annotations

import pytest

from tests.integration.service.factory import register_node

from .conftest import Api, pod

pytestmark = pytest.mark.integration


async def test_a_uid_naming_another_namespaces_pod_is_refused(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    squat = pod("squat", namespace="team-a", tflops="10")
    squat["metadata"]["uid"] = "victim-ns/future"
    status, body = await api.send("POST", "/api/v1/allocations", squat)
    assert status == 400 and body["field"] == "metadata.uid", body
    assert body["error"].startswith("metadata.uid='victim-ns/future'"), body
    status, victim = await api.send("POST", "/api/v1/allocations", pod("future", namespace="victim-ns", tflops="10"))
    assert status == 200 and victim["type"] == "allocation_granted" and victim["allocation_id"] == "victim-ns/future"
