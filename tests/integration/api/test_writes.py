"""The write endpoints end to end: each publishes one intent and answers with its decision."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import aiohttp
import pytest
import yaml

from events import decisions
from tests.integration.service.factory import register_node
from tests.integration.service.harness import start_reader, start_replica

from .conftest import Api, pod

pytestmark = pytest.mark.integration


async def test_submit_is_decided_and_idempotent_per_pod(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    status, first = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="30"))
    assert status == 200 and first["type"] == "allocation_granted", first
    assert first["node"] == "n1" and first["position"] and first["allocation_id"] == "team-a/p1"
    status, again = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="30"))
    assert status == 200 and again["type"] == "existing" and again["allocation_id"] == first["allocation_id"]
    granted = (await api.get("/api/v1/allocations", pod="p1"))[1]["items"]
    assert len(granted) == 1  # one pod, one allocation
    status, as_yaml = await api.send("POST", "/api/v1/allocations", data=yaml.safe_dump(pod("p2", tflops="80")),
                                     headers={"Content-Type": "application/yaml"})
    assert status == 200 and as_yaml["type"] == "allocation_queued" and "0/1 GPUs fit" in as_yaml["reason"]


async def test_submit_refuses_what_the_webhook_would_not_allocate(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    status, body = await api.send("POST", "/api/v1/allocations", pod("d", kind="Deployment"))
    assert status == 400 and body["field"] == "kind"
    status, body = await api.send("POST", "/api/v1/allocations", pod("u", labelled=False))
    assert status == 400 and body["field"] == "metadata.labels"
    status, body = await api.send("POST", "/api/v1/allocations", pod("u", labelled=False), force="true")
    assert status == 200 and body["type"] == "allocation_granted"
    status, body = await api.send("POST", "/api/v1/allocations", pod("x", tflops="two"))
    assert status == 400 and body["field"] == "tensor-fusion.ai/tflops-request"
    assert "strconv" not in body["error"]


async def test_release_frees_and_a_second_release_is_refused(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    _, granted = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="60"))
    _, queued = await api.send("POST", "/api/v1/allocations", pod("p2", tflops="60"))
    assert queued["type"] == "allocation_queued"
    status, released = await api.send("DELETE", f"/api/v1/allocations/{quote(granted['allocation_id'], safe='')}")
    assert status == 200 and released["type"] == "allocation_released"
    assert released["allocation_id"] == "team-a/p1"
    _, after = await api.get(f"/api/v1/allocations/{quote(queued['allocation_id'], safe='')}")
    assert after["status"] == "granted"  # the release let the queued one in
    status, again = await api.send("DELETE", f"/api/v1/allocations/{quote(granted['allocation_id'], safe='')}")
    assert status == 404 and again["field"] == "id" and again["ended"]["status"] == "released"
    assert again["error"].startswith("allocation 'team-a/p1' is not live: released at ")
    assert again["error"].endswith("(released GPUs n1-gpu0 on n1: released through the HTTP API)"), again
    status, unknown = await api.send("DELETE", "/api/v1/allocations/nobody")
    assert status == 404 and "no allocation has this id" in unknown["error"] and unknown["ended"] is None
    assert await _rejections(api) == []  # refused from the projection: nothing was published


async def test_a_resize_answers_like_a_release_when_not_live_and_409_while_queued(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    await api.send("POST", "/api/v1/allocations", pod("p1", tflops="60"))
    await api.send("POST", "/api/v1/allocations", pod("p2", tflops="60"))
    status, body = await api.send("POST", "/api/v1/allocations/team-a/p2/resize", {"request": {"tflops": "5"}})
    assert status == 409 and body["field"] == "id" and "is queued, not granted" in body["error"], body
    status, body = await api.send("POST", "/api/v1/allocations/nobody/resize", {"request": {"tflops": "5"}})
    assert status == 404 and body["field"] == "id" and body["ended"] is None, body
    assert body["error"] == "allocation 'nobody' is not live (no allocation has this id)"
    await api.send("DELETE", "/api/v1/allocations/team-a/p1")
    status, body = await api.send("POST", "/api/v1/allocations/team-a/p1/resize", {"request": {"tflops": "5"}})
    assert status == 404 and "is not live: released at " in body["error"], body
    status, body = await api.send("POST", "/api/v1/allocations/team-a/p2/resize",
                                  {"request": {"tflops": "9"}, "limit": {"tflops": "5"}})
    assert status == 400 and body["field"] == "request", body
    assert await _rejections(api) == []


async def test_resize_changes_the_request_and_bad_quantities_are_400(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    _, granted = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="20"))
    path = f"/api/v1/allocations/{quote(granted['allocation_id'], safe='')}/resize"
    status, resized = await api.send("POST", path, {"request": {"tflops": "40", "vram": "2Gi"}})
    assert status == 200 and resized["type"] == "allocation_resized", resized
    _, gpus = await api.get("/api/v1/gpus")
    assert gpus["items"][0]["available"]["tflops"] == "60"
    status, too_big = await api.send("POST", path, {"request": {"tflops": "400", "vram": "2Gi"}})
    assert status == 200 and too_big["type"] == "resize_rejected" and too_big["reason"]
    assert too_big["max_request"]["tflops"] == "100" and too_big["remain"]["tflops"] == "60", too_big
    for body, field in (({"request": {"tflops": "1e999999999"}}, "request.tflops"),
                        ({"request": {"tflops": "-1"}}, "request.tflops"), ({"request": "x"}, "request"),
                        ({"request": {"tflops": "1", "gpus": 2}}, "request.gpus"), ({"extra": 1}, "body.extra")):
        status, body_out = await api.send("POST", path, body)
        assert status == 400 and body_out["field"] == field, (body, body_out)


async def test_quota_set_list_remove_and_pool_configure(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    quota = {"total_requests": {"tflops": "50", "vram": "10Gi"}, "max_workers": 3}
    status, done = await api.send("PUT", "/api/v1/quotas/team-a", quota)
    assert status == 200 and done["type"] == "quota_set"
    _, listed = await api.get("/api/v1/quotas", namespace="team-a")
    (item,) = listed["items"]
    assert item["quota"]["total_requests"] == {"tflops": "50", "vram": "10Gi"} and item["quota"]["max_workers"] == 3
    _, refused = await api.send("POST", "/api/v1/allocations", pod("big", tflops="60"))
    assert refused["type"] in ("allocation_rejected", "allocation_queued") and "quota" in refused["reason"]
    status, bad = await api.send("PUT", "/api/v1/quotas/team-a", {"total_requests": {"vram": "8Ei"}})
    assert status == 400 and bad["field"] == "total_requests.vram" and "bound of 4Ei" in bad["error"], bad
    for bad_namespace in ("Team-A", "team_a", "-team", "x" * 64):
        status, bad = await api.send("PUT", f"/api/v1/quotas/{bad_namespace}", quota)
        assert status == 400 and bad["field"] == "namespace" and "namespace name" in bad["error"], bad
    status, removed = await api.send("DELETE", "/api/v1/quotas/team-a")
    assert status == 200 and removed["type"] == "quota_removed"
    assert (await api.get("/api/v1/quotas", namespace="team-a"))[1]["items"] == [] or \
        (await api.get("/api/v1/quotas", namespace="team-a"))[1]["items"][0]["quota"] is None
    status, configured = await api.send("PUT", "/api/v1/pools/default", {"placement": "low-load-first"})
    assert status == 200 and configured["type"] == "pool_configured", configured
    _, pools = await api.get("/api/v1/pools")
    assert pools["items"][0]["config"]["placement"] == "low-load-first" and pools["items"][0]["configured"]
    status, bad = await api.send("PUT", "/api/v1/pools/default", {"placement": "fastest"})
    assert status == 400 and bad["field"] == "placement" and "best-fit" in bad["error"], bad
    status, bad = await api.send("PUT", "/api/v1/pools/default", {"vram_weight": 1e308})
    assert status == 400 and bad["field"] == "vram_weight"
    settings = {"isolation_policy": "dynamic", "topology": "hard", "max_topology_tier": 1}
    status, configured = await api.send("PUT", "/api/v1/pools/default", settings)
    assert status == 200 and configured["type"] == "pool_configured", configured
    assert settings.items() <= (await api.get("/api/v1/pools"))[1]["items"][0]["config"].items()
    status, bad = await api.send("PUT", "/api/v1/pools/default", {"topology": "strict"})
    assert status == 400 and bad["field"] == "topology"


async def _rejections(api: Api) -> list[decisions.IntentRejected]:
    """Every intent_rejected in the permanent log."""
    return [stored.event async for stored in api.replica.allocator.store.read()
            if isinstance(stored.event, decisions.IntentRejected)]


async def test_refusals_the_projection_shows_write_nothing_into_the_log(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    for method, path, body, status, field in (
            ("DELETE", "/api/v1/allocations/never", None, 404, "id"),
            ("POST", "/api/v1/allocations/never/resize", {"request": {"tflops": "1"}}, 404, "id"),
            ("PUT", "/api/v1/pools/default", {"placement": "fastest"}, 400, "placement"),
            ("DELETE", "/api/v1/quotas/team-z", None, 404, "namespace"),
            ("DELETE", "/api/v1/pools/nosuch", None, 404, "pool"),
            ("DELETE", "/api/v1/pools/default", None, 409, "pool")):
        answer_status, answer = await api.send(method, path, body)
        assert (answer_status, answer["field"]) == (status, field), (method, path, answer)
    assert await _rejections(api) == []


async def test_a_typo_pool_is_removed_and_a_pool_with_nodes_is_not(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    status, configured = await api.send("PUT", "/api/v1/pools/defualt", {"placement": "best-fit"})
    assert status == 200 and configured["type"] == "pool_configured"
    assert [p["name"] for p in (await api.get("/api/v1/pools"))[1]["items"]] == ["default", "defualt"]
    status, removed = await api.send("DELETE", "/api/v1/pools/defualt")
    assert status == 200 and removed["type"] == "pool_removed", removed
    assert [p["name"] for p in (await api.get("/api/v1/pools"))[1]["items"]] == ["default"]
    status, held = await api.send("DELETE", "/api/v1/pools/default")
    assert status == 409 and "n1" in held["error"] and "remove the nodes first" in held["error"], held


async def test_racing_duplicate_submits_answer_existing(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    answers = await asyncio.gather(*(api.send("POST", "/api/v1/allocations", pod("racer")) for _ in range(40)))
    assert {status for status, _ in answers} == {200}, answers
    kinds = sorted(body["type"] for _, body in answers)
    assert kinds == ["allocation_granted"] + ["existing"] * 39, kinds
    assert len((await api.get("/api/v1/allocations", pod="racer"))[1]["items"]) == 1
    assert await _rejections(api) == []


async def test_wait_zero_answers_202_and_the_intent_is_still_decided(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    status, pending = await api.send("POST", "/api/v1/allocations", pod("later"), wait="0")
    assert status == 202 and pending["status"] == "pending" and pending["intent_id"].startswith("api-")
    for _ in range(200):
        if (await api.get("/api/v1/allocations", pod="later"))[1]["items"]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the pending intent was never decided")
    status, body = await api.send("POST", "/api/v1/allocations", pod("x"), wait="61")
    assert status == 400 and body["field"] == "wait"


async def test_a_second_reader_answers_reads_and_writes_and_the_writers_serve_only_probes(
        api: Api, nats_url: str, database_url: str) -> None:
    standby = await start_replica(nats_url, database_url=database_url, holder="r2")
    second = await start_reader(nats_url, database_url=database_url)
    try:
        assert standby.allocator.keeper.role == "standby"
        await api.publish(register_node("n1", gpus=1))
        async with aiohttp.ClientSession() as session:
            other = Api(session, api.replica, second, api.js)
            status, decided = await other.send("POST", "/api/v1/allocations", pod("via-second", tflops="10"))
            assert status == 200 and decided["type"] == "allocation_granted", decided
            assert second.position >= decided["position"]  # read-your-writes: applied before the answer
            _, listed = await other.get("/api/v1/allocations", pod="via-second")
            assert [a["status"] for a in listed["items"]] == ["granted"]
            for writer in (api.replica, standby):
                base = f"http://127.0.0.1:{writer.port}"
                for path in ("/api/v1/status", "/ui/", "/openapi.json"):
                    async with session.get(base + path) as r:
                        assert r.status == 404, (writer.allocator.keeper.role, path, r.status)
                async with session.post(base + "/api/v1/simulate", data=b"{}") as r:
                    assert r.status in (404, 405, 413, 415), r.status
                async with session.get(base + "/readyz") as r:
                    assert r.status == 200 and (await r.json())["role"] in ("leader", "standby")
    finally:
        await second.stop()
        await standby.stop()
