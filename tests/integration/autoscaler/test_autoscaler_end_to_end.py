"""End to end on real NATS + PostgreSQL: the allocator service and the autoscaler service.

Samples published on gpuledger.metrics.<node> -> ResizeAllocation -> AllocationResized in the
PostgreSQL log; a resize over the namespace quota -> ResizeRejected -> capped retry ->
AllocationResized at the quota's room.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from nats.js import JetStreamContext

from events import codec, intents
from events.metrics import UsageSample, encode_sample
from events.subjects import metrics_subject
from events.values import AllocationSpec, GpuSpec, QuotaAmount, QuotaSpec, Resources
from services.allocator.adapters import database
from services.shared import messaging
from tests.integration.autoscaler.runner import RunningAutoscaler, start_autoscaler
from tests.integration.service.harness import Replica, start_replica, until

pytestmark = pytest.mark.integration
GI = 1 << 30


@pytest.fixture
async def stack(nats_url: str, database_url: str, jetstream: JetStreamContext
                ) -> AsyncIterator[tuple[Replica, RunningAutoscaler]]:
    replica = await start_replica(nats_url, database_url=database_url)
    await until(lambda: replica.allocator.keeper.is_leader, what="leadership")
    autoscaler = await start_autoscaler(nats_url)
    try:
        yield replica, autoscaler
    finally:
        await autoscaler.stop()
        await replica.stop()


def attributes(**extra: Any) -> dict[str, str]:
    config = {"autoSetResources": {"enable": True, "targetResource": "all", "initialDelayPeriod": "0s",
                                   "interval": "200ms"}, **extra}
    return {"tensor-fusion.ai/autoscale": "true", "gpuledger.io/autoscaling-config": json.dumps(config)}


async def setup(js: JetStreamContext, attrs: dict[str, str], quota: QuotaSpec | None = None) -> None:
    gpu = GpuSpec(name="n1-gpu0", capacity=Resources(milli_tflops=200_000, vram_bytes=80 * GI))
    await messaging.publish_intent(js, intents.RegisterNode(intent_id="node-n1", node="n1", pool="default",
                                                            gpus=(gpu,)))
    if quota is not None:
        await messaging.publish_intent(js, intents.SetQuota(intent_id="quota-ml", namespace="ml", spec=quota))
    spec = AllocationSpec(allocation_id="uid-1", namespace="ml", pod="llama-0", pool="default", workload="llama",
                          request=Resources(milli_tflops=10_000, vram_bytes=8 * GI),
                          limit=Resources(milli_tflops=20_000, vram_bytes=16 * GI), attributes=attrs)
    await messaging.publish_intent(js, intents.RequestAllocation(intent_id="req-uid-1", spec=spec))


async def logged(database_url: str, kind: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(database.asyncpg_dsn(database_url))
    try:
        rows = await conn.fetch("SELECT data FROM events WHERE type = $1 ORDER BY position", kind)
    finally:
        await conn.close()
    return [json.loads(r["data"]) if isinstance(r["data"], str) else dict(r["data"]) for r in rows]


async def test_samples_become_a_resize_in_the_log(stack: tuple[Replica, RunningAutoscaler],
                                                  jetstream: JetStreamContext, database_url: str) -> None:
    _, autoscaler = stack
    await setup(jetstream, attributes())
    engine = autoscaler.runtime.engine
    await until(lambda: "uid-1" in engine.view.workers, timeout_s=30, what="grant seen by the autoscaler")
    nc = autoscaler.runtime.nc
    start = datetime.now(UTC) - timedelta(minutes=120)
    await nc.publish(metrics_subject("n1"), b'{"type":"usage_sample","vram_bytes_used":-1}')
    for i in range(120):
        sample = UsageSample(workload="llama", namespace="ml", pod="llama-0", allocation_id="uid-1", node="n1",
                             gpu="n1-gpu0", milli_tflops_used=100_000, vram_bytes_used=1_000_000_000,
                             at=start + timedelta(minutes=i))
        await nc.publish(metrics_subject("n1"), encode_sample(sample))
    await nc.flush()
    want = (100_000, 1_717_986_918)
    await until(lambda: engine.view.workers["uid-1"].current.request == Resources(
        milli_tflops=want[0], vram_bytes=want[1]), timeout_s=30, what="AllocationResized")
    resized = await logged(database_url, "allocation_resized")
    assert [(e["request"]["milli_tflops"], e["request"]["vram_bytes"]) for e in resized] == [want]
    assert engine.dropped["invalid"] == 1


async def test_over_quota_resize_is_rejected_then_capped_and_applied(
        stack: tuple[Replica, RunningAutoscaler], jetstream: JetStreamContext, database_url: str) -> None:
    _, autoscaler = stack
    boost = {"enable": True, "name": "boost", "start": "0 0 * * *", "end": "0 0 * * 0-6",
             "desiredResources": {"requests": {"tflops": "110", "vram": "20Gi"},
                                  "limits": {"tflops": "110", "vram": "20Gi"}}}
    quota = QuotaSpec(total_requests=QuotaAmount(milli_tflops=50_000, vram_bytes=100 * GI))
    await setup(jetstream, attributes(cronScalingRules=[boost]), quota=quota)
    engine = autoscaler.runtime.engine
    await until(lambda: "uid-1" in engine.view.workers
                and engine.view.workers["uid-1"].current.request.milli_tflops == 50_000,
                timeout_s=30, what="capped resize applied")
    rejected = await logged(database_url, "resize_rejected")
    resized = await logged(database_url, "allocation_resized")
    assert [r["request"]["milli_tflops"] for r in rejected] == [110_000]
    assert rejected[0]["max_request"]["milli_tflops"] == 50_000
    assert [(r["request"]["milli_tflops"], r["limit"]["milli_tflops"]) for r in resized] == [(50_000, 110_000)]
    assert codec.tag_of(intents.ResizeAllocation) == "resize_allocation"
