"""/metrics against a real allocator and a reader: the reader's per-pool gauges and lag, the
writer's outcomes by reason code and queue waits (each process exports its own)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.service.factory import register_node, request

from .conftest import Api

pytestmark = pytest.mark.integration


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape_one(api: Api, base: str) -> Samples:
    async with api.session.get(base + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def scrape(api: Api) -> Samples:
    """The reader's and the writer's samples together (no family is in both)."""
    reader, writer = await scrape_one(api, api.base), await scrape_one(api, api.writer_base)
    assert not {name for name, _ in reader} & {name for name, _ in writer}
    return {**reader, **writer}


async def test_pool_gauges_outcomes_and_queue_wait(api: Api) -> None:
    await api.publish(register_node("n1", gpus=2), register_node("n2", gpus=1, pool="other"))
    await api.publish(request("a", tflops=60), request("b", tflops=60), request("q", tflops=50))
    seen = await scrape(api)
    pool = (("pool", "default"),)
    assert seen[("gpuledger_pool_capacity_tflops", pool)] == 200.0
    assert seen[("gpuledger_pool_allocated_tflops", pool)] == 120.0
    assert seen[("gpuledger_pool_available_tflops", pool)] == 80.0
    assert seen[("gpuledger_pool_capacity_vram_bytes", (("pool", "other"),))] == 16 * 2**30
    assert seen[("gpuledger_pool_allocated_vram_bytes", pool)] == 2 * 2**30
    assert seen[("gpuledger_pool_gpus", (("phase", "Running"), ("pool", "default")))] == 2
    assert seen[("gpuledger_pool_allocations", (("pool", "default"), ("status", "granted")))] == 2
    assert seen[("gpuledger_pool_queued", (("pool", "default"), ("qos", "medium")))] == 1
    assert seen[("gpuledger_pool_queued", (("pool", "other"), ("qos", "medium")))] == 0
    assert seen[("gpuledger_allocation_outcomes_total", (("code", "capacity"), ("outcome", "queued")))] == 1
    assert seen[("gpuledger_allocation_outcomes_total", (("code", ""), ("outcome", "granted")))] == 2
    assert seen[("gpuledger_intents_pending", ())] == 0
    assert ("gpuledger_queue_depth", ()) not in seen
    head = await api.replica.allocator.store.last_position()
    assert seen[("gpuledger_reader_position", ())] == seen[("gpuledger_reader_log_head", ())] == head
    assert seen[("gpuledger_reader_lag_events", ())] == 0
    writer = await scrape_one(api, api.writer_base)
    assert not any(name.startswith(("gpuledger_pool_", "gpuledger_reader_")) for name, _ in writer)

    status, _ = await api.send("DELETE", f"/api/v1/allocations/{quote('a')}")
    assert status == 200
    seen = await scrape(api)
    assert seen[("gpuledger_queue_wait_seconds_count", (("pool", "default"), ("qos", "medium")))] == 1
    assert seen[("gpuledger_allocation_outcomes_total", (("code", ""), ("outcome", "granted_from_queue")))] == 1
    assert seen[("gpuledger_pool_queued", (("pool", "default"), ("qos", "medium")))] == 0
