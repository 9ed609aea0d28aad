"""The Prometheus source against an in-test aiohttp server answering /api/v1/query like Prometheus."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from services.autoscaler import sources
from services.autoscaler.engine import Engine
from services.autoscaler.histogram import TFLOPS_OPTIONS
from services.autoscaler.settings import DEFAULT_TFLOPS_QUERY, DEFAULT_VRAM_QUERY
from tests.unit.autoscaler.builders import GI, gpu, granted, node, spec

NOW = 1772712000.0  # 2026-03-05T12:00:00Z


def vector(value: str, pod: str = "llama-0") -> dict[str, object]:
    return {"metric": {"namespace": "ml", "pod": pod, "gpu": "0", "Hostname": "node-0"}, "value": [NOW, value]}


ANSWERS = {
    DEFAULT_TFLOPS_QUERY: [vector("0.5"), vector("NaN", pod="other-0")],
    DEFAULT_VRAM_QUERY: [vector(str(6 * GI)), vector("1", pod="ghost-0")],
}


@pytest.fixture
async def prometheus() -> AsyncIterator[str]:
    async def query(request: web.Request) -> web.Response:
        promql = request.query.get("query", "")
        if promql not in ANSWERS:
            return web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400)
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": ANSWERS[promql]}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_poll_feeds_the_workload_and_drops_bad_series(prometheus: str) -> None:
    engine = Engine(new_id=lambda: "x")
    engine.view.apply(node(gpu(tflops=312, vram_gi=80)))
    engine.view.apply(granted(spec("a-0", pod="llama-0")))
    async with aiohttp.ClientSession() as session:
        taken = await sources.poll_prometheus(engine, session, url=prometheus, tflops_query=DEFAULT_TFLOPS_QUERY,
                                              vram_query=DEFAULT_VRAM_QUERY)
    assert taken == 1
    engine.flush(("ml", "llama"))  # the round's start feeds the worker's merged minute
    agg = engine.aggregators[("ml", "llama")]
    assert agg.sample_count == 1
    assert agg.samplers["a-0"].vram_peak == 6 * GI
    edge = TFLOPS_OPTIONS.bucket_start(TFLOPS_OPTIONS.find_bucket(0.5 * 312) + 1)  # fraction x GPU capacity
    assert agg.tflops.percentile(1.0) == edge
    assert dict(engine.dropped) == {"nan": 1, "unknown_workload": 1}


async def test_prometheus_error_is_raised_with_its_message(prometheus: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(sources.PrometheusError, match="parse error"):
            await sources.query(session, prometheus, "up{")
