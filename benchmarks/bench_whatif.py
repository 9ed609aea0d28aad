"""Benchmark: ``gpuledger whatif`` over a window of N intents on the openb cluster (6,212 GPUs).

Builds a log in the in-memory store the way the allocator writes one: the openb node list
registered, then the openb trace's pods, each living its trace lifetime (deletion_time -
creation_time, capped at the trace's 90th percentile so the cluster reaches its steady state within
the window), arriving at a steady rate that offers ``--load`` times the cluster's GPU capacity
(the trace's own arrivals keep 6,212 GPUs almost idle), repeated with fresh ids until the window
holds ``--intents`` intents (RequestAllocation and ReleaseAllocation) after ``--warmup`` more
before it (the window starts on a full cluster), each decided by ``domain.process`` (one long-lived Scheduler,
pool strategy ``--recorded``) and appended as its own DecidedIntent (untimed). Then times the
what-if over the window: the baseline (checked event for event against the log) and one
alternative per ``--strategy``, reading the log in chunks through the store's ``read`` (events
decoded from JSON, as from PostgreSQL). Prints wall and CPU seconds, intents/s, the peak RSS and
the report's figures. The machine is shared: read the load average beside the times.

    python3 benchmarks/bench_whatif.py [--intents 100000] [--warmup 50000] [--load 1.05] [--strategy fgd-strand]
                                       [--recorded node-compact-gpu-low-load]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events import intents as it
from events.values import PoolConfig
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.whatif.changes import Alternative
from services.allocator.api.whatif.engine import Replay, whatif
from services.allocator.domain import ClusterState, Scheduler, process
from services.allocator.ports import DecidedIntent
from services.trace import openb

POOL = "openb"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 256


def build(intents: int, recorded: str, load: float, warmup: int) -> tuple[InMemoryEventStore, datetime]:
    """The log (module docstring): ``warmup`` intents before the window, then ``intents`` in it;
    returns the store and the window's start."""
    leases = InMemoryLeaseStore()
    store = InMemoryEventStore(leases)
    lease = asyncio.run(leases.acquire("allocator", holder="bench", ttl_s=10**9, now=T0))
    assert lease is not None
    state, scheduler = ClusterState.empty(), Scheduler()
    pending: list[DecidedIntent] = []

    def send(intent: it.AnyIntent, at: datetime) -> None:
        events = process(state, intent, at, scheduler)
        pending.append(DecidedIntent(intent_id=intent.intent_id, stream_seq=0, events=tuple(events)))
        if len(pending) >= BATCH:
            flush()

    def flush() -> None:
        asyncio.run(store.append(list(pending), lease="allocator", epoch=lease.epoch, state=state))
        pending.clear()

    start = T0 - timedelta(seconds=1)
    send(it.ConfigurePool(intent_id="pool", pool=POOL, config=PoolConfig(placement=recorded)), start)
    for node in openb.nodes(pool=POOL):
        send(node, start)
    pods = [p for p in openb.trace_pods() if p.created is not None and p.deleted is not None and p.deleted > p.created]
    raw = [(p.deleted or 0) - (p.created or 0) for p in pods]
    cap = sorted(raw)[len(raw) * 9 // 10]  # the trace's lifetimes have a long tail (p90 6,574 s, max 145 days)
    lives = [min(life, cap) for life in raw]
    capacity = 1000 * len(state.gpus)
    gap = (sum(lives) / len(lives)) * (sum(p.demand for p in pods) / len(pods)) / (capacity * load)
    rounds = (warmup + intents) // (2 * len(pods)) + 2
    steps = []
    for round_ in range(rounds):
        for i, (pod, life) in enumerate(zip(pods, lives, strict=True)):
            aid = f"r{round_}-{pod.name}"
            arrive = (round_ * len(pods) + i) * gap
            steps.append((arrive, 1, aid, pod))
            steps.append((arrive + life, 0, aid, pod))
    steps.sort(key=lambda s: (s[0], s[1], s[2]))
    since = T0
    for done, (second, kind, aid, pod) in enumerate(steps[:warmup + intents]):
        at = T0 + timedelta(seconds=second)
        if done == warmup:
            since = at
        if kind:
            send(it.RequestAllocation(intent_id=f"q-{aid}", spec=pod.spec(pool=POOL, allocation_id=aid)), at)
        else:
            send(it.ReleaseAllocation(intent_id=f"x-{aid}", allocation_id=aid, reason="trace departure"), at)
    flush()
    return store, since


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--intents", type=int, default=100_000)
    parser.add_argument("--strategy", action="append", default=None)
    parser.add_argument("--recorded", default="node-compact-gpu-low-load")
    parser.add_argument("--warmup", type=int, default=50_000, help="intents before the window (the cluster fills)")
    parser.add_argument("--load", type=float, default=1.05, help="offered GPU demand / capacity (1.05: queues form)")
    args = parser.parse_args()
    strategies = args.strategy or ["fgd-strand"]
    began = time.perf_counter()
    store, since = build(args.intents, args.recorded, args.load, args.warmup)
    built_s = time.perf_counter() - began
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    replay = Replay(since=since, until=None, pool=POOL, alternatives=[Alternative(strategy=s) for s in strategies])
    wall, cpu = time.perf_counter(), time.process_time()
    report = asyncio.run(whatif(store, replay))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"log: {len(store.rows):,} events built in {built_s:.1f} s; window: {report.intents:,} intents, "
          f"{report.events:,} events; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"whatif (baseline + {', '.join(strategies)}): wall {wall:.1f} s, CPU {cpu:.1f} s, "
          f"{report.intents / wall:,.0f} intents/s; peak RSS {rss_before / 1024:.0f} MiB before, "
          f"{rss_after / 1024:.0f} MiB after; baseline mismatches {report.fairness.mismatches}")
    for run in report.runs:
        s = run.summary
        print(f"  {run.name}: GPU {s.gpu_utilisation_pct:.1f} %, TFLOPS {s.tflops_utilisation_pct:.1f} %, "
              f"stranded {s.stranded_gpus:.1f} GPUs ({s.fragmentation_pct_of_free:.1f} % of free), "
              f"requests {s.requests}, wait p50/p95/p99 {s.wait_s['p50']:.0f}/{s.wait_s['p95']:.0f}/"
              f"{s.wait_s['p99']:.0f} s")
    for comparison in report.comparisons:
        print(f"  {comparison.name}: {comparison.differing:,} requests' fates differ")


if __name__ == "__main__":
    main()
