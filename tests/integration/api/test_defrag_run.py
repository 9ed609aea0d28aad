"""Defrag campaigns through the reader's API against a real allocator (NATS, the writer loop, a
reader): ``POST /api/v1/pools/{pool}/defrag`` starts one (reserving each target), ``GET`` shows it,
the replacement request of a moved workload is granted the reserved GPUs and the emptied node shows
idle, ``DELETE`` cancels the rest; bad input is 400 naming the field, a second campaign 409; the
writer's, the reader's and a replayed projection agree."""

from __future__ import annotations

import msgspec
import pytest

from events import intents
from events.values import PoolConfig
from services.allocator.domain import ClusterState, digest, evolve
from tests.integration.service.factory import register_node, request

from .conftest import Api

pytestmark = pytest.mark.integration


def _of(workload: str, allocation_id: str) -> intents.RequestAllocation:
    r = request(allocation_id, tflops=20)
    return msgspec.structs.replace(r, spec=msgspec.structs.replace(r.spec, workload=workload))


async def test_a_campaign_reserves_moves_and_frees(api: Api) -> None:
    await api.publish(intents.ConfigurePool(intent_id="spread", pool="default",
                                            config=PoolConfig(placement="low-load-first")))
    await api.publish(*(register_node(f"n{i}", gpus=2) for i in range(3)))
    await api.publish(*(_of(f"w{i}", f"a{i}") for i in range(3)))
    await api.publish(intents.ConfigurePool(intent_id="pack", pool="default", config=PoolConfig()))

    for body, field in (({"max_moves": 0}, "max_moves"), ({"max_duration": "ten"}, "max_duration"),
                        ({"max_duration": "48h"}, "max_duration"), ({"surprise": 1}, "body.surprise"),
                        ({"max_tflops": "lots"}, "max_tflops")):
        status, error = await api.send("POST", "/api/v1/pools/default/defrag", body)
        assert status == 400 and error["field"] == field, (body, error)
    status, missing = await api.send("POST", "/api/v1/pools/nosuch/defrag", {})
    assert status == 404 and missing["field"] == "pool"
    status, none = await api.get("/api/v1/pools/default/defrag")
    assert status == 404 and none["field"] == "pool"

    status, started = await api.send("POST", "/api/v1/pools/default/defrag", {"max_moves": 5, "max_duration": "5m"})
    assert status == 200 and started["type"] == "defrag_started", started
    campaign = started["campaign"]
    assert campaign["state"] == "running" and campaign["planned_moves"] == 2 and len(campaign["open"]) == 2
    status, again = await api.send("POST", "/api/v1/pools/default/defrag", {})
    assert status == 409 and again["field"] == "pool"

    first = campaign["open"][0]
    status, source = await api.get(f"/api/v1/allocations/{first['allocation_id']}")  # `why` says it moves
    assert status == 200 and source["explanation"]["defrag"]["role"] == "source", source
    assert f"defrag campaign {campaign['campaign_id']} moves it" in source["explanation"]["reason"]
    await api.publish(_of(first["workload"], "replacement"))  # the evicted pod's replacement
    moved = api.reader.reader.follower.state.allocations["replacement"]
    assert (moved.node, moved.gpus) == (first["to"]["node"], first["to"]["gpus"])
    status, replaced = await api.get("/api/v1/allocations/replacement")
    assert replaced["explanation"]["defrag"] == {"campaign_id": campaign["campaign_id"], "role": "replacement",
                                                 "moved": first["allocation_id"], "from": first["from"]["node"]}
    await api.publish(intents.ReleaseAllocation(intent_id="gone", allocation_id=first["allocation_id"]))
    status, nodes = await api.get(f"/api/v1/nodes/{first['from']['node']}")
    assert status == 200 and nodes["idle_since"] is not None  # the emptied node shows idle

    status, shown = await api.get("/api/v1/pools/default/defrag")
    assert status == 200 and shown["completed"] == 1 and len(shown["open"]) == 1
    assert shown["closed"][0]["replacement_id"] == "replacement"
    status, cancelled = await api.send("DELETE", "/api/v1/pools/default/defrag", reason="enough")
    assert status == 200 and cancelled["type"] == "move_cancelled", cancelled
    await api.caught_up()
    status, ended = await api.get("/api/v1/pools/default/defrag")
    assert ended["state"] == "ended" and ended["end_code"] == "cancelled" and ended["cancelled"] == 1
    status, nothing = await api.send("DELETE", "/api/v1/pools/default/defrag")
    assert status == 404 and "no defrag campaign is running" in nothing["error"]

    writer = api.replica.allocator.state
    replayed = ClusterState.empty()
    async for stored in api.replica.allocator.store.read(after=0):
        evolve(replayed, stored.event)
    assert digest(replayed) == digest(writer) == digest(api.reader.reader.follower.state)


async def test_a_pool_defrag_schedule_is_set_through_the_pool_config(api: Api) -> None:
    await api.publish(register_node("n0", gpus=1))
    for defrag, field in (({"schedule": "nope"}, "defrag.schedule"), ({"schedule": "0 3 * * *", "timezone": "X/Y"},
                                                                    "defrag.timezone"),
                          ({"schedule": "0 3 * * *", "max_duration": "3d"}, "defrag.max_duration"),
                          ({"schedule": "0 3 * * *", "every": 1}, "defrag.every"), ("0 3 * * *", "defrag")):
        status, error = await api.send("PUT", "/api/v1/pools/default", {"defrag": defrag})
        assert status == 400 and error["field"] == field, (defrag, error)
    status, answer = await api.send("PUT", "/api/v1/pools/default", {"defrag": {
        "schedule": "0 3 * * *", "timezone": "Asia/Shanghai", "max_duration": "1h", "max_moves": 4}})
    assert status == 200 and answer["type"] == "pool_configured", answer
    schedule = api.replica.allocator.state.pools["default"].defrag
    assert schedule is not None and (schedule.schedule, schedule.timezone, schedule.max_duration_s,
                                     schedule.max_moves) == ("0 3 * * *", "Asia/Shanghai", 3600, 4)
    pools = {p["name"]: p for p in await api.all_pages("/api/v1/pools")}
    shown = pools["default"]["config"]["defrag"]
    assert shown == {"schedule": "0 3 * * *", "timezone": "Asia/Shanghai", "max_duration": "3600s", "max_moves": 4,
                     "max_share_of_namespace": 100.0, "enabled": True}
    status, again = await api.send("PUT", "/api/v1/pools/default", pools["default"]["config"])  # `pool` CLI round trip
    assert status == 200 and api.replica.allocator.state.pools["default"].defrag == schedule, again


async def test_a_pool_put_keeps_what_the_body_leaves_out(api: Api) -> None:
    await api.publish(register_node("n0", gpus=1))
    schedule = {"schedule": "0 3 * * *", "timezone": "Europe/Paris", "max_duration": "1h", "max_moves": 4}
    status, answer = await api.send("PUT", "/api/v1/pools/default", {"defrag": schedule, "placement": "best-fit",
                                                                      "vram_weight": 0.5, "enforcement": "hami-core"})
    assert status == 200 and answer["type"] == "pool_configured", answer
    kept = api.replica.allocator.state.pools["default"]
    status, answer = await api.send("PUT", "/api/v1/pools/default", {"max_workers_per_node": 3})
    assert status == 200 and answer["type"] == "pool_configured", answer
    config = api.replica.allocator.state.pools["default"]
    assert config.defrag == kept.defrag is not None  # the schedule survives a body without `defrag`
    assert (config.placement, config.vram_weight, config.enforcement, config.max_workers_per_node) == (
        "best-fit", 0.5, "hami-core", 3)
    shown = {p["name"]: p for p in await api.all_pages("/api/v1/pools")}["default"]["config"]
    assert shown["defrag"]["timezone"] == "Europe/Paris" and shown["max_workers_per_node"] == 3
    status, answer = await api.send("PUT", "/api/v1/pools/default", {"defrag": None, "max_workers_per_node": None})
    assert status == 200 and answer["type"] == "pool_configured", answer
    config = api.replica.allocator.state.pools["default"]
    assert config.defrag is None and config.max_workers_per_node == 0 and config.placement == "best-fit"
