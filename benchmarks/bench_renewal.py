"""Lease renewal under a long batch: the largest gap between the writer's lease renewals while one
batch decides, with the decide slices (the default) and without them (the control).

A whole allocator replica runs on the in-memory twins (MemoryBus, in-memory stores, the real
LeaseKeeper with the default lease_ttl_s 1.5 s / lease_renew_s 0.3 s) and decides one batch of
``--intents`` requests through ``domain.process`` made ``--per-intent-ms`` slower (time.sleep: the
event loop is held as by a slow decision in a full cluster). Without slices the largest gap is the
whole batch; the writer trusts its lease for lease_ttl_s - lease_renew_s = 1.2 s after a renewal.
With ``--per-intent-ms 0`` it measures what slicing costs: decisions/s of the same batch both ways.

    python3 benchmarks/bench_renewal.py --intents 256 --per-intent-ms 8
    python3 benchmarks/bench_renewal.py --intents 2000 --per-intent-ms 0
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from events import intents
from events.decisions import AnyEvent
from services.allocator import bootstrap, domain
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.adapters.memory_bus import MemoryBus
from services.allocator.domain.state import ClusterState
from services.allocator.settings import AllocatorSettings
from services.shared import lifecycle
from tests.integration.service.factory import register_node, request


async def run(*, intents_n: int, per_intent_s: float, sliced: bool) -> dict[str, Any]:
    leases = InMemoryLeaseStore()
    renewals: list[float] = []
    acquire = leases.acquire

    async def recording(name: str, **options: Any) -> Any:
        if options.get("holder", "").startswith("bench"):
            renewals.append(time.monotonic())
        return await acquire(name, **options)

    leases.acquire = recording  # type: ignore[method-assign]
    scheduler = domain.Scheduler()

    def process(state: ClusterState, intent: intents.AnyIntent, now: datetime) -> list[AnyEvent]:
        if per_intent_s:
            time.sleep(per_intent_s)
        return domain.process(state, intent, now, scheduler=scheduler)

    settings = msgspec.convert({"nats_url": "nats://unused:1", "holder": "bench", "batch_size": intents_n + 1,
                                "heartbeat_check_s": 0.0, "fetch_wait_s": 0.01}, AllocatorSettings)
    bus, teardown, stop = MemoryBus(), lifecycle.Teardown(), asyncio.Event()
    store = InMemoryEventStore(leases)
    allocator = await bootstrap.bootstrap(settings, teardown=teardown, store=store, leases=leases, bus=bus,
                                          process=process)
    if not sliced:
        allocator.decide_slice_s = math.inf
    task = asyncio.create_task(allocator.run(stop))
    while not allocator.keeper.is_leader:
        await asyncio.sleep(0.01)
    nodes = max(1, intents_n // 64)
    for n in range(nodes):
        await bus.publish(register_node(f"n{n}", gpus=8))
    while len(store.intents) < nodes:
        await asyncio.sleep(0.005)
    started = time.monotonic()
    for i in range(intents_n):
        await bus.publish(request(f"p{i}", tflops=10))
    while len(store.intents) < nodes + intents_n:
        await asyncio.sleep(0.005)
    seconds = time.monotonic() - started
    stop.set()
    await asyncio.wait([task], timeout=10)
    await teardown.close()
    during = [t for t in renewals if t >= started]
    marks = [started, *during, started + seconds]
    return {"mode": "sliced" if sliced else "unsliced", "batch_s": round(seconds, 3),
            "decisions_per_s": round(intents_n / seconds), "renewals": len(during),
            "max_gap_ms": round(1000 * max(b - a for a, b in itertools.pairwise(marks)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--intents", type=int, default=256, help="requests in the one batch")
    parser.add_argument("--per-intent-ms", type=float, default=8.0, help="extra milliseconds held per decision")
    args = parser.parse_args()
    for sliced in (True, False):
        print(msgspec.json.encode(asyncio.run(run(intents_n=args.intents, per_intent_s=args.per_intent_ms / 1000,
                                                  sliced=sliced))).decode())


if __name__ == "__main__":
    main()
