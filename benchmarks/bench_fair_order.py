"""Benchmark: releases on the openb cluster filled to 100 %, with and without shares (fair-share order).

Registers the Alibaba node list (1,213 nodes, 6,212 GPUs), fills the pool (untimed) with openb pods
spread over eight namespaces until ``--waiting`` requests wait, then times ``--releases`` releases of
a random granted allocation: ``process`` (the release, its folds and the queue drain it triggers),
each followed (untimed) by a new openb request so the queue stays full. Modes: ``none`` (no
shares: today's order), ``shares`` (eight shares, one per namespace, weights 1-4, no guarantee: the
drain orders by weighted dominant share and re-ranks after each grant; every grant is borrowed),
``decay`` (the same with ``fair_share_half_life_s`` 3600, the clock advancing 10 s per release).
Latencies are the thread's CPU time (the VM is shared). Also times ``fairshare.waiting`` (the
queue listing in fair-share order) once per mode. Prints p50/p99/max microseconds and grants per
release.

    python3 benchmarks/bench_fair_order.py [--releases 300] [--waiting 500] [--modes none,shares,decay]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import openb
from events import decisions as ev
from events import intents as it
from events.values import PoolConfig, SharePool, ShareSpec
from services.allocator.domain import ClusterState, Scheduler, fairshare, process
from services.allocator.domain.model import GRANTED

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POOL = "default"
NAMESPACES = tuple(f"team-{i}" for i in range(8))


def run(mode: str, releases: int, waiting: int, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    scheduler = Scheduler()
    state = ClusterState.empty()
    now = NOW
    config = PoolConfig(fair_share_half_life_s=3600 if mode == "decay" else 0)
    process(state, it.ConfigurePool(intent_id="pool", pool=POOL, config=config), now, scheduler)
    for intent in openb.nodes(pool=POOL):
        process(state, intent, now, scheduler)
    if mode != "none":
        for i, ns in enumerate(NAMESPACES):
            spec = ShareSpec(namespaces=(ns,), weight=1 + i % 4, pools=(SharePool(pool=POOL),))
            process(state, it.SetShare(intent_id=f"share-{i}", name=f"share-{i}", spec=spec), now, scheduler)
    pods = openb.pods(pool=POOL)
    n = 0

    def arrive() -> None:
        nonlocal n
        n += 1
        spec = msgspec.structs.replace(rng.choice(pods), allocation_id=f"p-{n}", pod=f"p-{n}",
                                       namespace=rng.choice(NAMESPACES), qos="medium")
        process(state, it.RequestAllocation(intent_id=f"p-{n}", spec=spec), now, scheduler)

    while len(state.queue) < waiting:
        arrive()
    cpu: list[float] = []
    grants: list[int] = []
    for k in range(releases):
        if mode == "decay":
            now += timedelta(seconds=10)
        held = sorted(a for a, s in state.allocations.items() if s.status == GRANTED)
        intent = it.ReleaseAllocation(intent_id=f"rel-{k}", allocation_id=rng.choice(held))
        start = time.thread_time()
        out = process(state, intent, now, scheduler)
        cpu.append(time.thread_time() - start)
        grants.append(sum(isinstance(e, ev.AllocationGranted) for e in out))
        while len(state.queue) < waiting:
            arrive()
    start = time.thread_time()
    order = fairshare.waiting(state)
    listing = time.thread_time() - start
    assert len(order) == len(state.queue)
    return {
        "gpus": float(len(state.gpus)), "releases": float(releases), "waiting": float(len(state.queue)),
        "process_p50_us": statistics.median(cpu) * 1e6,
        "process_p99_us": statistics.quantiles(cpu, n=100)[98] * 1e6,
        "process_max_us": max(cpu) * 1e6,
        "grants_per_release": statistics.mean(grants),
        "listing_ms": listing * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=300)
    parser.add_argument("--waiting", type=int, default=500)
    parser.add_argument("--modes", default="none,shares,decay")
    args = parser.parse_args()
    print(f"# bench_fair_order on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}")
    for mode in args.modes.split(","):
        result = run(mode, args.releases, args.waiting)
        print(f"{mode:>7}  " + "  ".join(f"{k}={v:,.2f}" if v % 1 else f"{k}={v:,.0f}" for k, v in result.items()),
              flush=True)


if __name__ == "__main__":
    main()
