"""Idle nodes and the consolidation plan through the reader's API against a real allocator:
``idle_since`` on every node document, ``GET /api/v1/nodes?idle=true&idle_for=``, the 400s of bad
values, the reader's, the writer's and a replayed projection agreeing on when each node became
idle; ``GET /api/v1/pools/{pool}/defrag-plan`` emptying nodes, explained, writing nothing."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote

import pytest

from events import intents
from events.values import PoolConfig
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


async def test_defrag_plan_empties_nodes_explains_and_changes_nothing(api: Api) -> None:
    await api.publish(intents.ConfigurePool(intent_id="spread", pool="default",
                                            config=PoolConfig(placement="low-load-first")))
    await api.publish(*(register_node(f"n{i}", gpus=2) for i in range(3)))
    await api.publish(*(request(f"a{i}", tflops=20) for i in range(3)))
    await api.publish(intents.ConfigurePool(intent_id="pack", pool="default", config=PoolConfig()))
    placed = {a: api.reader.reader.follower.state.allocations[a].node for a in ("a0", "a1", "a2")}
    assert len(set(placed.values())) == 3  # one per node
    head = await api.replica.allocator.store.last_position()

    status, body = await api.get("/api/v1/pools/default/defrag-plan", max_moves="5")
    assert status == 200, body
    assert body["dry_run"] is True and "gpuledger defrag run" in body["execution"]
    assert len(body["nodes_emptied"]) == 2 and len(body["moves"]) == 2
    assert (body["before"]["busy_nodes"], body["after"]["busy_nodes"]) == (3, 1)
    move = body["moves"][0]
    assert move["from"]["node"] == body["nodes_emptied"][0] and move["to"]["node"] not in body["nodes_emptied"]
    assert move["frees"]["tflops"] == "20" and move["explanation"].startswith(f"move team-a/{move['pod']} (")
    assert body["drains"][0]["explanation"].startswith(f"empties {move['from']['node']}: 1 allocation(s)")

    status, one = await api.get("/api/v1/pools/default/defrag-plan", max_moves="1", max_tflops="15")
    assert status == 200 and one["moves"] == [] and {s["code"] for s in one["skipped"]} == {"tflops"}
    for params, field in (({"max_moves": "0"}, "max_moves"), ({"max_moves": "many"}, "max_moves"),
                          ({"max_share_of_namespace": "150"}, "max_share_of_namespace"),
                          ({"max_share_of_namespace": "nan"}, "max_share_of_namespace"),
                          ({"max_tflops": "-5"}, "max_tflops"), ({"max_tflops": "lots"}, "max_tflops"),
                          ({"budget": "1"}, "budget"), ({"objective": "tidy"}, "objective")):
        status, error = await api.get("/api/v1/pools/default/defrag-plan", **params)
        assert status == 400 and error["field"] == field, (params, error)
    status, frag = await api.get("/api/v1/pools/default/defrag-plan", max_moves="5", objective="fragmentation")
    assert status == 200 and frag["objective"] == "fragmentation" and frag["drains"] == []
    assert "not executed" in frag["execution"] and body["objective"] == "nodes"
    assert all(m["from"]["node"] != m["to"]["node"] for m in frag["moves"]) and len(frag["moves"]) <= 5
    status, missing = await api.get("/api/v1/pools/nosuch/defrag-plan")
    assert status == 404 and missing["field"] == "pool"
    assert await api.replica.allocator.store.last_position() == head  # a dry run appends nothing
    assert {a: api.reader.reader.follower.state.allocations[a].node for a in placed} == placed
