"""Shares end to end on a real allocator (PostgreSQL + NATS) and a reader: the GPUShare watch of the
in-test Kubernetes API server publishes SetShare / RemoveShare, the HTTP API sets, lists, shows and
removes shares with read-your-writes, refuses bad input naming the field (bad JSON before anything is
published, the allocator's refusals after), and the figures follow grants into the API and /metrics."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from events import intents
from services.admission.watches import watch_shares
from services.shared import kube, messaging
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.factory import register_node, request
from tests.integration.service.harness import until

from .conftest import Api
from .test_metrics import scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _gpushare(name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "gpuledger.io/v1", "kind": "GPUShare", "metadata": {"name": name}, "spec": spec}


async def test_shares_through_the_api_and_the_gpushare_watch(api: Api, kube_api: KubeApiServer) -> None:
    await api.publish(register_node("n1", gpus=4))
    churn = {"fair_share_half_life_s": 3600, "reclaim_min_runtime_s": 300, "reclaim_max_per_minute": 6}
    status, answer = await api.send("PUT", "/api/v1/pools/default", churn, wait=10)
    assert status == 200 and answer["type"] == "pool_configured", answer
    config = (await api.get("/api/v1/pools"))[1]["items"][0]["config"]
    assert {k: config[k] for k in churn} == churn
    status, answer = await api.send("PUT", "/api/v1/pools/default", {"reclaim_max_per_minute": -1})
    assert (status, answer["field"]) == (400, "reclaim_max_per_minute")

    async def publish(intent: intents.AnyIntent) -> int:
        return await messaging.publish_intent(api.js, intent)

    async with await kube.api_client(url=kube_api.url) as k8s:
        watch = asyncio.create_task(watch_shares(k8s, publish=publish))
        try:
            # the watch: a child listed before its parent is published after it
            kube_api.create("gpushares", _gpushare("research", pools=[{"pool": "default", "guaranteed": {
                "tflops": "300", "vram": "64Gi", "gpus": 3}}]))
            kube_api.create("gpushares", _gpushare("batch", namespaces=["team-b"], parent="research",
                                                   pools=[{"pool": "default", "guaranteed": {"gpus": 1}}]))
            await until(lambda: {"research", "batch"} <= set(api.replica.allocator.state.shares), what="the shares")
            await api.caught_up()

            # the API: set (read-your-writes), bad input, refusals by the allocator
            body = {"namespaces": ["team-a"], "parent": "research", "weight": 2,
                    "pools": [{"pool": "default", "guaranteed": {"tflops": "100", "vram": "16Gi", "gpus": 2},
                               "borrowing_limit": {"gpus": 1}}]}
            status, answer = await api.send("PUT", "/api/v1/shares/train", body, wait=10)
            assert status == 200 and answer["type"] == "share_set", answer
            status, train = await api.get("/api/v1/shares/train")
            assert status == 200 and train["parent"] == "research" and train["weight"] == 2
            assert train["spec"] == {**body, "pools": [{**body["pools"][0], "lending_limit": None,  # type: ignore[dict-item]
                                                        "borrowing_limit": {"tflops": None, "vram": None, "gpus": 1}}]}
            for bad, field in (({**body, "weight": 0}, "weight"),
                               ({**body, "pools": [{"pool": "default", "guaranteed": {"vram": "lots"}}]},
                                "pools.0.guaranteed.vram"),
                               ({**body, "namespaces": ["Team A"]}, "namespaces.0"),
                               ({**body, "colour": "blue"}, "body.colour")):
                status, answer = await api.send("PUT", "/api/v1/shares/train", bad, wait=10)
                assert (status, answer["field"]) == (400, field), answer
            status, answer = await api.send("PUT", "/api/v1/shares/Bad_Name", body)
            assert (status, answer["field"]) == (400, "name")
            status, answer = await api.send("PUT", "/api/v1/shares/other", {"namespaces": ["team-b"]}, wait=10)
            assert status == 400 and "team-b" in answer["error"], answer  # already in share batch
            status, answer = await api.send("DELETE", "/api/v1/shares/research", wait=10)
            assert status == 409 and answer["type"] == "intent_rejected", answer  # still a parent
            status, answer = await api.get("/api/v1/shares/nope")
            assert status == 404 and "research" in answer["error"]

            # figures follow the grants: team-a holds 3 GPUs against 2 guaranteed
            await api.publish(request("a1", tflops=50), request("a2", tflops=50), request("a3", tflops=50))
            status, page = await api.get("/api/v1/shares", pool="default")
            assert [s["name"] for s in page["items"]] == ["batch", "research", "train"]
            (pool,) = page["items"][2]["pools"]
            assert pool["used"] == {"tflops": "150", "vram": "3Gi", "gpus": 3}
            assert pool["guaranteed"] == {"tflops": "100", "vram": "16Gi", "gpus": 2}
            assert page["items"][1]["children"] == ["batch", "train"]
            await api.publish(request("a4", tflops=50))  # a 4th GPU: beyond train's borrowing limit of 1
            status, waiting = await api.get("/api/v1/allocations/a4")
            assert waiting["code"] == "share" and "share terms" in waiting["explanation"]["would_need"], waiting
            assert (await api.get("/api/v1/shares/train"))[1]["pools"][0]["waiting"] == 1
            status, summary = await api.get("/api/v1/status")
            assert {s["share"] for s in summary["shares"]} == {"batch", "research", "train"}
            seen = await scrape(api)
            assert seen[("gpuledger_share_used_gpus", (("pool", "default"), ("share", "train")))] == 3.0
            assert seen[("gpuledger_share_guaranteed_gpus", (("pool", "default"), ("share", "research")))] == 3.0

            # removal: through the API, and a deleted GPUShare
            status, answer = await api.send("DELETE", "/api/v1/shares/train", wait=10)
            assert status == 200 and answer["type"] == "share_removed", answer
            assert (await api.get("/api/v1/shares/train"))[0] == 404
            kube_api.delete("gpushares", "research")  # its RemoveShare waits for its child's
            kube_api.delete("gpushares", "batch")
            await until(lambda: not api.replica.allocator.state.shares, what="both GPUShares removed")
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
