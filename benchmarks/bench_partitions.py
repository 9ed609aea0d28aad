"""Benchmark: partitioned (MIG) decisions on a pool of H100 80GB nodes (8 GPUs each).

Registers ``--nodes`` nodes of 8 H100 SXM GPUs (989 TFLOPS, 80 GiB each), fills them (untimed)
with partitioned requests until ``--target`` of the memory slots are held or 500 requests wait,
then times ``--decisions`` decisions: a partitioned request while below the target, a release of
a random live allocation while above it (which retries the queue). Requests draw a named template
(1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb) or only amounts (least-waste choice). One
long-lived Scheduler; latency is the thread's CPU time per ``process()`` call.

    python3 benchmarks/bench_partitions.py [--nodes 500] [--decisions 4000] [--target 0.7]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GpuSpec, Resources
from services.allocator.domain import ClusterState, Scheduler, process

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POOL = "mig"
SLOTS = 8
SHAPES: tuple[tuple[str, int, int], ...] = (
    ("1g.10gb", 0, 0), ("1g.10gb", 0, 0), ("1g.20gb", 0, 0), ("2g.20gb", 0, 0), ("3g.40gb", 0, 0),
    ("4g.40gb", 0, 0), ("7g.80gb", 0, 0), ("", 50_000, 8 * 10**9), ("", 120_000, 15 * 10**9),
    ("", 300_000, 30 * 10**9),
)
"""(template, milli-TFLOPS, bytes) a request draws from: named templates, or amounts only."""


def build(nodes: int, scheduler: Scheduler) -> ClusterState:
    state = ClusterState.empty()
    for n in range(nodes):
        gpus = tuple(GpuSpec(name=f"n{n}-g{i}", capacity=Resources(milli_tflops=989_000, vram_bytes=80 * 2**30),
                             model="H100_SXM", index=i) for i in range(8))
        process(state, it.RegisterNode(intent_id=f"reg-{n}", node=f"n{n}", pool=POOL, gpus=gpus), NOW, scheduler)
    return state


def held_slots(state: ClusterState) -> int:
    return sum(p.end - p.start for g in state.gpus.values() for p in g.partitions.values())


def run(nodes: int, decisions: int, target: float, seed: int = 7) -> dict[str, float]:
    scheduler = Scheduler()
    state = build(nodes, scheduler)
    rng = random.Random(seed)
    live: list[str] = []
    capacity = SLOTS * len(state.gpus)
    outcomes: dict[str, int] = {}
    n = 0

    def next_intent() -> tuple[str, it.AnyIntent]:
        nonlocal n
        n += 1
        if live and (held_slots(state) > target * capacity or len(state.queue) >= 500):
            aid = live.pop(rng.randrange(len(live)))
            return "release", it.ReleaseAllocation(intent_id=f"rel-{n}", allocation_id=aid)
        template, tflops, vram = rng.choice(SHAPES)
        request = Resources(milli_tflops=tflops, vram_bytes=vram)
        spec = AllocationSpec(allocation_id=f"p{n}", namespace="ns", pod=f"p{n}", pool=POOL, request=request,
                              limit=request, isolation="partitioned", partition_template=template)
        return "request", it.RequestAllocation(intent_id=f"req-{n}", spec=spec)

    def account(out: list[ev.AnyEvent]) -> None:
        for e in out:
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
            if isinstance(e, ev.AllocationGranted):
                live.append(e.spec.allocation_id)
            elif isinstance(e, ev.AllocationReleased) and e.allocation_id in live:
                live.remove(e.allocation_id)

    while held_slots(state) <= target * capacity and len(state.queue) < 500:
        account(process(state, next_intent()[1], NOW, scheduler))
    outcomes.clear()
    cpu: list[float] = []
    requests: list[float] = []
    for _ in range(decisions):
        kind, intent = next_intent()
        start = time.thread_time()
        out = process(state, intent, NOW, scheduler)
        cpu.append(time.thread_time() - start)
        if kind == "request":
            requests.append(cpu[-1])
        account(out)
    return {"gpus": float(len(state.gpus)), "p50_us": statistics.median(cpu) * 1e6,
            "p99_us": statistics.quantiles(cpu, n=100)[98] * 1e6,
            "request_p99_us": statistics.quantiles(requests, n=100)[98] * 1e6,
            "decisions_per_s": len(cpu) / sum(cpu), "slots_held": held_slots(state) / capacity,
            "queued_now": float(len(state.queue)), **{k: float(v) for k, v in sorted(outcomes.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--decisions", type=int, default=4000)
    parser.add_argument("--target", type=float, default=0.7, help="share of memory slots to hold")
    args = parser.parse_args()
    print(f"# bench_partitions on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}, {args.nodes} nodes x 8 H100, target {args.target:.0%} of slots")
    result = run(args.nodes, args.decisions, args.target)
    print("  ".join(f"{k}={v:,.2f}" if k == "slots_held" else f"{k}={v:,.1f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
