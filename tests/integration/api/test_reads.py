"""The read endpoints against a real allocator: shapes, filters, pagination, 400s and 404s."""

from __future__ import annotations

import msgspec
import pytest

from events import intents
from events.values import PoolConfig
from tests.integration.service.factory import register_node, request

from .conftest import Api

pytestmark = pytest.mark.integration


async def seed(api: Api) -> None:
    """n1 (default, 2 GPUs of 100 TFLOPS), n2 (other, 1 GPU); a, b granted in default, c in other,
    q queued (asks more than any GPU has free)."""
    await api.publish(register_node("n1", gpus=2), register_node("n2", gpus=1, pool="other"))
    await api.publish(request("a", tflops=60), request("b", tflops=60, namespace="team-b"),
                      request("c", tflops=30, pool="other"), request("q", tflops=50))


async def test_pools_nodes_gpus_and_status_show_capacity_usage_and_queue(api: Api) -> None:
    await seed(api)
    status, body = await api.get("/api/v1/pools")
    assert status == 200 and body["continue"] is None
    pools = {p["name"]: p for p in body["items"]}
    assert set(pools) == {"default", "other"}
    default = pools["default"]
    assert default["capacity"]["tflops"] == "200" and default["allocated"]["tflops"] == "120"
    assert default["available"]["tflops"] == "80" and default["gpus_by_phase"] == {"Running": 2}
    assert default["allocations"] == {"granted": 2, "queued": 1}
    assert default["queued_by_qos"]["medium"] == 1 and default["config"]["placement"]
    assert await api.get("/api/v1/pools/default") == (200, default)
    status, missing = await api.get("/api/v1/pools/defualt")
    assert status == 404 and missing["field"] == "pool" and "known: default, other" in missing["error"]
    assert (await api.get("/api/v1/nodes", pool="other"))[1]["items"][0]["name"] == "n2"
    status, nodes = await api.get("/api/v1/nodes", phase="Lost")
    assert status == 200 and nodes["items"] == []
    status, gpus = await api.get("/api/v1/gpus", node="n1")
    assert [g["name"] for g in gpus["items"]] == ["n1-gpu0", "n1-gpu1"]
    assert [g["name"] for g in (await api.get("/api/v1/gpus", pool="other"))[1]["items"]] == ["n2-gpu0"]
    status, summary = await api.get("/api/v1/status")
    assert summary["allocations"] == {"granted": 3, "queued": 1} and "gpus" not in summary
    assert [p["name"] for p in summary["pools"]] == ["default", "other"]


async def test_node_detail_and_allocation_filters(api: Api) -> None:
    await seed(api)
    status, node = await api.get("/api/v1/nodes/n1")
    assert status == 200 and node["phase"] == "Ready" and "last_heartbeat" in node
    assert [g["name"] for g in node["gpu_list"]] == ["n1-gpu0", "n1-gpu1"]
    assert sorted(a["allocation_id"] for a in node["allocation_list"]) == ["a", "b"]
    by = {}
    for name, value in (("namespace", "team-b"), ("status", "queued"), ("pool", "other"), ("pod", "a"),
                        ("node", "n2")):
        status, body = await api.get("/api/v1/allocations", **{name: value})
        assert status == 200
        by[name] = [a["allocation_id"] for a in body["items"]]
    assert by == {"namespace": ["b"], "status": ["q"], "pool": ["c"], "pod": ["a"], "node": ["c"]}
    status, both = await api.get("/api/v1/allocations", namespace="team-a", status="granted")
    assert [a["allocation_id"] for a in both["items"]] == ["a", "c"]


async def test_pagination_walks_every_item_once(api: Api) -> None:
    await api.publish(*(register_node(f"n{i}", gpus=3) for i in range(4)))
    every = [g["name"] for g in (await api.get("/api/v1/gpus", limit=1000))[1]["items"]]
    assert len(every) == 12
    status, first = await api.get("/api/v1/gpus", limit=5)
    assert status == 200 and len(first["items"]) == 5 and first["continue"]
    walked = [g["name"] for g in await api.all_pages("/api/v1/gpus", limit=5)]
    assert walked == every
    assert [g["name"] for g in await api.all_pages("/api/v1/gpus", limit=5, node="n2")] == [
        "n2-gpu0", "n2-gpu1", "n2-gpu2"]


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/api/v1/gpus", {"limit": "0"}, "limit"), ("/api/v1/gpus", {"limit": "1001"}, "limit"),
    ("/api/v1/gpus", {"limit": "ten"}, "limit"), ("/api/v1/gpus", {"nodes": "n1"}, "nodes"),
    ("/api/v1/allocations", {"status": "bogus"}, "status"), ("/api/v1/gpus", {"continue": "!!"}, "continue"),
    ("/api/v1/nodes", {"continue": "eyJ4IjoxfQ"}, "continue"), ("/api/v1/queue", {"qos": "urgent"}, "qos"),
    ("/api/v1/pools", {"pool": "x"}, "pool"), ("/api/v1/quotas", {"namespace": "x" * 300}, "namespace"),
])
async def test_bad_query_values_are_400_naming_the_parameter(api: Api, path: str, params: dict[str, str],
                                                             field: str) -> None:
    status, body = await api.get(path, **params)
    assert status == 400 and body["field"] == field, body


async def test_repeated_parameter_and_unknown_resources(api: Api) -> None:
    async with api.session.get(f"{api.base}/api/v1/gpus?node=a&node=b") as r:
        assert r.status == 400 and (await r.json())["field"] == "node"
    status, body = await api.get("/api/v1/nodes/nope")
    assert status == 404 and body["field"] == "name"
    status, body = await api.get("/api/v1/allocations/nope")
    assert status == 404 and body["field"] == "id"


async def test_allocation_explanations_granted_and_queued(api: Api) -> None:
    await seed(api)
    status, granted = await api.get("/api/v1/allocations/a")
    assert status == 200 and granted["status"] == "granted"
    assert granted["explanation"]["node"] == "n1" and granted["explanation"]["strategy"]
    status, queued = await api.get("/api/v1/allocations/q")
    why = queued["explanation"]
    assert queued["status"] == "queued" and why["code"] == "capacity"
    assert any(f["removed"] for f in why["filters"]) and "pool default" in why["would_need"]
    assert queued["reason"] == why["reason"]


async def test_queue_lists_waiting_requests_in_grant_order(api: Api) -> None:
    """The queue's order (priority, then arrival) with preemption off, so the critical request waits."""
    await api.publish(intents.ConfigurePool(intent_id="off", pool="default", config=PoolConfig(preemption="off")))
    await api.publish(register_node("n1", gpus=1))
    await api.publish(request("big", tflops=90))
    await api.publish(request("w1", tflops=50), request("w2", tflops=50, namespace="team-b"))
    plain = request("w3", tflops=50)
    await api.publish(msgspec.structs.replace(plain, spec=msgspec.structs.replace(plain.spec, qos="critical")))
    status, queue = await api.get("/api/v1/queue")
    assert status == 200
    assert [(e["allocation_id"], e["rank"]) for e in queue["items"]] == [("w3", 0), ("w1", 1), ("w2", 2)]
    assert all(e["current"]["code"] == "capacity" and e["reason"] for e in queue["items"])
    assert [e["allocation_id"] for e in (await api.get("/api/v1/queue", namespace="team-b"))[1]["items"]] == ["w2"]
    assert [e["allocation_id"] for e in await api.all_pages("/api/v1/queue", limit=1)] == ["w3", "w1", "w2"]
