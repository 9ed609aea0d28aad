"""The autoscaler service on a real nats-server (allocator with in-memory stores): histogram
checkpoints in the KV bucket survive a restart, ``gpuledger recommend`` asks the running
service, malformed samples are counted while the service keeps answering."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from nats.js import JetStreamContext
from typer.testing import CliRunner

from events import intents
from events.metrics import UsageSample, encode_sample
from events.subjects import metrics_subject
from events.values import AllocationSpec, GpuSpec, Resources
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.autoscaler import checkpoint
from services.autoscaler.settings import AutoscalerSettings
from services.autoscaler.wiring import AutoscalerRuntime
from services.cli.autoscaler_commands import ask
from services.cli.main import app
from services.shared import messaging
from tests.integration.autoscaler.runner import FAST, start_autoscaler
from tests.integration.service.harness import Replica, start_replica, until

pytestmark = pytest.mark.integration
GI = 1 << 30


@pytest.fixture
async def replica(nats_url: str, jetstream: JetStreamContext) -> AsyncIterator[Replica]:
    leases = InMemoryLeaseStore()
    running = await start_replica(nats_url, store=InMemoryEventStore(leases), leases=leases)
    await until(lambda: running.allocator.keeper.is_leader, what="leadership")
    yield running
    await running.stop()


async def grant(js: JetStreamContext) -> None:
    gpu = GpuSpec(name="n1-gpu0", capacity=Resources(milli_tflops=200_000, vram_bytes=80 * GI))
    await messaging.publish_intent(js, intents.RegisterNode(intent_id="node-n1", node="n1", pool="default",
                                                            gpus=(gpu,)))
    config = {"autoSetResources": {"enable": True, "targetResource": "", "initialDelayPeriod": "0s"}}
    spec = AllocationSpec(allocation_id="uid-1", namespace="ml", pod="llama-0", pool="default", workload="llama",
                          request=Resources(milli_tflops=10_000, vram_bytes=8 * GI),
                          limit=Resources(milli_tflops=20_000, vram_bytes=16 * GI),
                          attributes={"gpuledger.io/autoscaling-config": json.dumps(config)})
    await messaging.publish_intent(js, intents.RequestAllocation(intent_id="req-uid-1", spec=spec))


async def test_checkpoint_survives_restart_and_recommend_answers(nats_url: str, replica: Replica,
                                                                 jetstream: JetStreamContext) -> None:
    first = await start_autoscaler(nats_url)
    await grant(jetstream)
    engine = first.runtime.engine
    await until(lambda: "uid-1" in engine.view.workers, timeout_s=30, what="grant seen")
    nc = first.runtime.nc
    start = datetime.now(UTC) - timedelta(minutes=30)
    for payload in (b"{}", b'{"type":"usage_sample","workload":"llama","namespace":"ml","at":"x"}', b"\x00"):
        await nc.publish(metrics_subject("n1"), payload)
    for i in range(30):
        sample = UsageSample(workload="llama", namespace="ml", pod="llama-0", allocation_id="uid-1",
                             milli_tflops_used=(i + 1) * 1000, vram_bytes_used=4 * GI, at=start + timedelta(minutes=i))
        await nc.publish(metrics_subject("n1"), encode_sample(sample))
    await until(lambda: engine.aggregators.get(("ml", "llama")) is not None
                and engine.aggregators[("ml", "llama")].sample_count == 30, timeout_s=30, what="samples taken")
    live = await ask(nats_url, "llama", namespace="", timeout_s=5)
    assert live["samples"] == 30 and live["workload"] == "llama" and live["namespace"] == "ml"
    assert live["dropped_samples"] == {"invalid": 3}
    assert live["tflops"]["upper"] is not None
    await first.stop()

    second = await start_autoscaler(nats_url)
    try:
        restored = second.runtime.engine.aggregators[("ml", "llama")]
        assert restored.sample_count == 30
        again = await ask(nats_url, "llama", namespace="ml", timeout_s=5)
        assert (again["tflops"], again["vram"]) == (live["tflops"], live["vram"])
        assert (await ask(nats_url, "ghost", namespace="", timeout_s=5))["field"] == "workload"
        result = await asyncio.to_thread(CliRunner().invoke, app, ["recommend", "llama", "--json"],
                                         env={"GPULEDGER_NATS_URL": nats_url})
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["tflops"] == live["tflops"]
        missing = await asyncio.to_thread(CliRunner().invoke, app, ["recommend", "ghost", "--json"],
                                          env={"GPULEDGER_NATS_URL": nats_url})
        assert missing.exit_code == 2 and json.loads(missing.output)["field"] == "workload"
    finally:
        await second.stop()


async def test_the_event_follower_ends_on_stopping_even_if_its_cancellation_is_lost(
        nats_url: str, jetstream: JetStreamContext) -> None:
    """``gpuledger up`` stopped right after start (a bad inventory) waited 15 s for the autoscaler:
    its follower's cancellation was lost inside nats-py's subscribe (Python 3.11 ``wait_for``), and
    it waited on a bare future. The follower now also ends when ``stopping`` is set, uncancelled."""
    settings = msgspec.convert({**FAST, "nats_url": nats_url}, AutoscalerSettings)
    await messaging.ensure_streams(jetstream)
    nc = await messaging.connect(nats_url, name="follower-test")
    try:
        js = nc.jetstream()
        kv = await checkpoint.open_bucket(js, settings.autoscaler_checkpoint_bucket)
        runtime = AutoscalerRuntime(settings, nc=nc, js=js, kv=kv)
        follower = asyncio.create_task(runtime.follow_events())
        await asyncio.wait_for(runtime.caught_up.wait(), 30)
        assert not follower.done()
        runtime.stopping.set()
        await asyncio.wait_for(follower, 30)  # a liveness bound: before, it never ended
    finally:
        await nc.close()
