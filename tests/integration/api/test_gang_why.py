"""Gangs through the operator API: a waiting member's ``why`` says how many members are present and
what the gang needs; ``simulate`` of the quorum-th member says it would place the quorum; its
request places both members in one decision."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from tests.integration.service.factory import register_node

from .conftest import Api, pod

pytestmark = pytest.mark.integration


def member(name: str) -> dict[str, Any]:
    """A pod of Job ``trainer`` in gang mode with a quorum of 2 (TensorFusion's annotations)."""
    manifest = pod(name, tflops="10")
    manifest["metadata"]["annotations"].update({"tensor-fusion.ai/gang-enabled": "true",
                                                "tensor-fusion.ai/gang-min-members": "2"})
    manifest["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "trainer",
                                                "uid": "job-uid", "controller": True}]
    return manifest


async def test_why_and_simulate_explain_a_waiting_gang(api: Api) -> None:
    await api.publish(register_node("n1", gpus=2))
    _, first = await api.send("POST", "/api/v1/allocations", member("trainer-0"))
    assert first["type"] == "allocation_queued", first
    assert first["reason"] == "gang team-a/trainer: 1 of 2 members present, quorum 2"
    _, why = await api.get(f"/api/v1/allocations/{quote(first['allocation_id'], safe='')}")
    assert why["status"] == "queued" and why["explanation"]["code"] == "gang", why
    assert why["reason"] == first["reason"] and "quorum of gang team-a/trainer" in why["explanation"]["would_need"]
    _, simulated = await api.send("POST", "/api/v1/simulate", member("trainer-1"))
    assert simulated["outcome"]["type"] == "allocation_granted", simulated
    _, second = await api.send("POST", "/api/v1/allocations", member("trainer-1"))
    assert second["type"] == "allocation_granted", second
    _, placed = await api.get(f"/api/v1/allocations/{quote(first['allocation_id'], safe='')}")
    assert placed["status"] == "granted"
