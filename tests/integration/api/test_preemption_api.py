"""Preemption through the API on a real allocator: allocations by node (TensorFusion
GetAllocationReqByNodeName), simulate's preemption plan, and ``why``'s plan or reason for none."""

from __future__ import annotations

import msgspec
import pytest

from events import intents
from events.values import PoolConfig
from tests.integration.service.factory import register_node, request

from .conftest import Api, pod

pytestmark = pytest.mark.integration


def _low(allocation_id: str, tflops: int) -> intents.RequestAllocation:
    intent = request(allocation_id, tflops=tflops)
    return msgspec.structs.replace(intent, spec=msgspec.structs.replace(intent.spec, qos="low"))


async def test_allocations_by_node_list_what_runs_there(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1), register_node("n2", gpus=1))
    await api.publish(request("a", tflops=60), request("b", tflops=60), request("c", tflops=30))
    status, body = await api.get("/api/v1/nodes/n1/allocations")
    on_n1 = sorted(a["allocation_id"] for a in body["items"])
    status2, body2 = await api.get("/api/v1/nodes/n2/allocations")
    assert status == status2 == 200
    assert sorted(on_n1 + [a["allocation_id"] for a in body2["items"]]) == ["a", "b", "c"]
    assert all(a["node"] == "n1" and a["status"] == "granted" for a in body["items"])
    status, missing = await api.get("/api/v1/nodes/nope/allocations")
    assert status == 404 and missing["field"] == "name"


async def test_simulate_shows_the_plan_and_why_shows_why_none(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    await api.publish(_low("low", 100))
    status, sim = await api.send("POST", "/api/v1/simulate", pod("crit", tflops="50", qos="critical"))
    assert status == 200 and sim["outcome"]["type"] == "allocation_granted"
    assert sim["outcome"]["preempted"] == ["low"]
    plan = sim["preemption"]
    assert plan["possible"] and plan["node"] == "n1" and plan["gpus"] == ["n1-gpu0"]
    assert [v["allocation_id"] for v in plan["victims"]] == ["low"]
    status, sim = await api.send("POST", "/api/v1/simulate", pod("med", tflops="50", qos="medium"))
    assert sim["outcome"]["type"] == "allocation_queued" and sim["preemption"]["code"] == "priority"
    await api.publish(intents.ConfigurePool(intent_id="off", pool="default", config=PoolConfig(preemption="off")))
    await api.publish(request("waits", tflops=50))
    status, body = await api.get("/api/v1/allocations/waits")
    assert status == 200 and body["explanation"]["preemption"]["code"] == "off"
    assert "preemption is off" in body["explanation"]["preemption"]["reason"]


async def test_a_submit_that_preempts_answers_with_its_own_grant(api: Api) -> None:
    """The decision that preempts starts with the victims' AllocationPreempted; the submit must
    answer with the preemptor's grant (naming its victims), not the first event of the decision."""
    await api.publish(register_node("n1", gpus=1))
    await api.publish(_low("low", 100))
    status, body = await api.send("POST", "/api/v1/allocations", pod("crit", tflops="50", qos="critical"))
    assert status == 200, body
    assert body["type"] == "allocation_granted" and body["allocation_id"] == "team-a/crit"
    assert body["preempted"] == ["low"] and body["node"] == "n1"
