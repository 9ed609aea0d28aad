"""An allocation that is no longer live: GET, DELETE and resize answer 404 saying how it ended."""

from __future__ import annotations

import pytest

from events import intents
from events.values import AllocationSpec, Resources
from tests.integration.service.factory import register_node, request

from .conftest import Api

pytestmark = pytest.mark.integration


async def test_released_rejected_and_a_pod_found_by_name(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    one = Resources(milli_tflops=10_000, vram_bytes=2**30)
    spec = AllocationSpec(allocation_id="uid-7", namespace="team-a", pod="web-0", pool="default", request=one,
                          limit=one)
    await api.publish(intents.RequestAllocation(intent_id="req-uid-7", spec=spec), request("huge", tflops=500))
    await api.publish(intents.ReleaseAllocation(intent_id="rel-uid-7", allocation_id="uid-7", reason="pod deleted"))
    status, body = await api.get("/api/v1/allocations/uid-7")
    assert status == 404 and body["field"] == "id", body
    ended = body["ended"]
    assert (ended["status"], ended["pod"], ended["was_queued"]) == ("released", "web-0", False)
    assert ended["reason"] == "released GPUs n1-gpu0 on n1: pod deleted" and ended["ended_at"]
    assert body["error"] == f"allocation 'uid-7' is not live: released at {ended['ended_at']} ({ended['reason']})"
    status, by_pod = await api.get("/api/v1/allocations/team-a/web-0")  # no id team-a/web-0: the pod's newest life
    assert status == 404 and by_pod["ended"]["allocation_id"] == "uid-7"
    status, body = await api.get("/api/v1/allocations/huge")
    assert status == 404 and body["ended"]["status"] == "rejected" and body["ended"]["code"], body
    status, body = await api.get("/api/v1/allocations/never")
    assert status == 404 and body["ended"] is None and "no allocation has this id" in body["error"]
