"""Idle nodes through the reader's API against a real allocator: ``idle_since`` on every node
document, ``GET /api/v1/nodes?idle=true&idle_for=``, the 400s of bad values, and the reader's,
the writer's and a replayed projection agreeing on when each node became idle."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote

import pytest

from services.allocator.domain import ClusterState, evolve
from tests.integration.service.factory import register_node, request

from .conftest import Api

pytestmark = pytest.mark.integration


async def test_idle_nodes_filter_explain_and_match_the_log(api: Api) -> None:
    await api.publish(register_node("n1", gpus=2), register_node("n2", gpus=1),
                      register_node("n3", gpus=1, pool="other"))
    await api.publish(request("a", tflops=60))
    busy = api.reader.reader.follower.state.allocations["a"].node
    everyone = {n["name"]: n for n in await api.all_pages("/api/v1/nodes")}
    assert everyone[busy]["idle_since"] is None
    assert all(datetime.fromisoformat(n["idle_since"]) for name, n in everyone.items() if name != busy)
    idle = [n["name"] for n in await api.all_pages("/api/v1/nodes", idle="true")]
    assert idle == sorted({"n1", "n2", "n3"} - {busy})
    assert [n["name"] for n in await api.all_pages("/api/v1/nodes", idle="false")] == [busy]
    assert [n["name"] for n in await api.all_pages("/api/v1/nodes", idle="true", pool="other")] == ["n3"]
    assert [n["name"] for n in await api.all_pages("/api/v1/nodes", idle_for="0s")] == idle
    assert await api.all_pages("/api/v1/nodes", idle_for="2h") == []
    assert await api.all_pages("/api/v1/nodes", idle_for="99999999999999h") == []  # beyond any date: none
    for params, field in (({"idle": "yes"}, "idle"), ({"idle_for": "30"}, "idle_for"),
                          ({"idle_for": "-1m"}, "idle_for"), ({"idle": "false", "idle_for": "1m"}, "idle_for")):
        status, body = await api.get("/api/v1/nodes", **params)
        assert status == 400 and body["field"] == field, (params, body)

    status, _ = await api.send("DELETE", f"/api/v1/allocations/{quote('a')}")
    assert status == 200
    await api.caught_up()
    now_idle = {n["name"]: n["idle_since"] for n in await api.all_pages("/api/v1/nodes", idle="true")}
    assert set(now_idle) == {"n1", "n2", "n3"}
    assert datetime.fromisoformat(now_idle[busy]) > datetime.fromisoformat(everyone["n3"]["idle_since"])
    assert now_idle["n3"] == everyone["n3"]["idle_since"]  # a node already idle keeps its time

    writer = api.replica.allocator.state
    replayed = ClusterState.empty()
    async for stored in api.replica.allocator.store.read(after=0):
        evolve(replayed, stored.event)
    for name, since in now_idle.items():
        assert writer.nodes[name].idle_since == replayed.nodes[name].idle_since == datetime.fromisoformat(since)
