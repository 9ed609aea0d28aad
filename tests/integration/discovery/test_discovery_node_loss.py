"""End to end on real NATS + PostgreSQL: discovery heartbeats -> allocator; a silent node's GPUs are not chosen.

Two discovery sources (static files, heartbeats every 0.2 s, TTL 1 s) publish through NATS to a
real allocator replica on PostgreSQL. Stopping one source makes its node Lost (CheckHeartbeats);
a request that only fits there then waits instead of landing on it, and a request that fits
anywhere goes to the live node. Restarting the source brings the node back and it is chosen again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest
from nats.js import JetStreamContext

from events.intents import RequestAllocation
from events.values import AllocationSpec, Resources
from services.allocator import bootstrap
from services.allocator.loop.leader import Allocator
from services.allocator.settings import AllocatorSettings
from services.discovery import settings, wiring
from services.shared import messaging

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAST = {"lease_ttl_s": 1.0, "lease_renew_s": 0.2, "heartbeat_check_s": 0.2, "fetch_wait_s": 0.1,
        "retry_delay_s": 0.05, "retry_max_s": 0.5, "tail_interval_s": 0.05, "http_port": 0}


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition()``; fail naming ``what`` after ``timeout_s`` (a liveness bound, not timing)."""
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached within {timeout_s}s") from None


class Source:
    """One discovery process (static file) running as a task until stopped."""

    def __init__(self, nats_url: str, inventory: Path) -> None:
        self.config = settings.load(environ={}, source="static", file=str(inventory), nats_url=nats_url,
                                    heartbeat_interval_s=0.2, heartbeat_ttl_s=1.0)
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task[object] | None = None

    def start(self) -> None:
        self.stop_event = asyncio.Event()
        self.task = asyncio.create_task(wiring.run_discovery(self.config, stop=self.stop_event))

    async def stop(self) -> None:
        self.stop_event.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 20)


@pytest.fixture
async def allocator(nats_url: str, database_url: str) -> AsyncIterator[Allocator]:
    config = msgspec.convert({**FAST, "nats_url": nats_url, "database_url": database_url, "holder": "e2e"},
                             AllocatorSettings)
    stop = asyncio.Event()
    ready: asyncio.Future[Allocator] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(bootstrap.serve(config, stop, on_ready=lambda a, _p: ready.set_result(a)))
    done, _ = await asyncio.wait([task, ready], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    running = ready.result()
    await until(lambda: running.keeper.is_leader, "leadership")
    yield running
    stop.set()
    await asyncio.wait_for(task, 30)


def request(name: str, *, models: tuple[str, ...] = ()) -> RequestAllocation:
    amount = Resources(milli_tflops=10_000, vram_bytes=2**30)
    spec = AllocationSpec(allocation_id=name, namespace="team", pod=name, pool="default", request=amount,
                          limit=amount, gpu_models=models)
    return RequestAllocation(intent_id=f"req-{name}", spec=spec)


async def test_silent_node_is_not_chosen_until_it_reports_again(
        allocator: Allocator, nats_url: str, jetstream: JetStreamContext, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("nodes: [{name: node-a, gpus: [{model: L4}]}]\n")
    (tmp_path / "b.yaml").write_text("nodes: [{name: node-b, gpus: [{model: H100_SXM}]}]\n")
    source_a, source_b = Source(nats_url, tmp_path / "a.yaml"), Source(nats_url, tmp_path / "b.yaml")
    source_a.start()
    source_b.start()
    try:
        await until(lambda: {"node-a", "node-b"} <= set(allocator.state.nodes), "both nodes registered")
        await source_b.stop()
        await until(lambda: allocator.state.nodes["node-b"].phase == "Lost", "node-b lost")
        assert allocator.state.nodes["node-a"].phase == "Ready"  # node-a kept heartbeating
        await messaging.publish_intent(jetstream, request("only-h100", models=("H100_SXM",)))
        await messaging.publish_intent(jetstream, request("anywhere"))
        await until(lambda: "anywhere" in allocator.state.allocations, "requests decided")
        await until(lambda: "only-h100" in allocator.state.allocations, "requests decided")
        assert allocator.state.allocations["only-h100"].status != "granted"
        assert allocator.state.allocations["anywhere"].node == "node-a"

        source_b.start()
        await until(lambda: allocator.state.nodes["node-b"].phase == "Ready", "node-b back")
        await until(lambda: allocator.state.allocations["only-h100"].status == "granted", "queued one granted")
        assert allocator.state.allocations["only-h100"].node == "node-b"
        await messaging.publish_intent(jetstream, request("h100-again", models=("H100_SXM",)))
        await until(lambda: "h100-again" in allocator.state.allocations, "request decided")
        assert allocator.state.allocations["h100-again"].node == "node-b"
        assert allocator.state.allocations["h100-again"].status == "granted"
    finally:
        await source_a.stop()
        await source_b.stop()
