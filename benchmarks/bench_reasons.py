"""Benchmark: the cost of keeping queued requests' reasons current (services.allocator.api.reasons).

Builds one pool of ``--nodes`` nodes with 8 GPUs of 100 TFLOPS / 80 GiB each, fills every GPU to
90 % TFLOPS, queues ``--queued`` requests of 20 TFLOPS (they wait for capacity), then times
``reasons.current`` for every queued request: what the allocator's reason keeper pays per queued
request in a touched pool and ``replay --verify`` pays once. One explaining Scheduler serves every
reason (``reasons.explainer``, as the keeper keeps one): the per-filter counts are computed once
per request shape and pool version. ``all`` is the time for every queued request's reason to be
current after a change, the issue 27 target being 2 s for 5,000.

    python3 benchmarks/bench_reasons.py [--nodes 1213] [--queued 5000]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events import intents
from events.values import AllocationSpec, GpuSpec, Resources
from services.allocator import domain
from services.allocator.api import reasons
from services.allocator.domain.state import ClusterState
from services.shared import lifecycle

GIB = 1 << 30
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def build(nodes: int, queued: int) -> ClusterState:
    state = ClusterState.empty()
    scheduler = domain.Scheduler()
    for n in range(nodes):
        gpus = tuple(GpuSpec(name=f"n{n}-g{i}", capacity=Resources(milli_tflops=100_000, vram_bytes=80 * GIB),
                             model="A100", index=i) for i in range(8))
        domain.process(state, intents.RegisterNode(intent_id=f"r{n}", node=f"n{n}", pool="default", gpus=gpus), NOW,
                       scheduler)
    for i in range(nodes * 8 + queued):
        size = 90_000 if i < nodes * 8 else 20_000
        amount = Resources(milli_tflops=size, vram_bytes=GIB)
        spec = AllocationSpec(allocation_id=f"a{i}", namespace=f"ns{i % 7}", pod=f"a{i}", pool="default",
                              request=amount, limit=amount)
        domain.process(state, intents.RequestAllocation(intent_id=f"q{i}", spec=spec), NOW, scheduler)
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--queued", type=int, default=5000)
    args = parser.parse_args()
    state = build(args.nodes, args.queued)
    lifecycle.HeapKeeper().settle()  # as the allocator does after loading its state
    waiting = reasons.queued(state)
    assert len(waiting) == args.queued, len(waiting)
    times = []
    explainer = reasons.explainer()
    for allocation in waiting:
        started = time.perf_counter()
        reason = reasons.current(state, allocation.spec, explainer)
        times.append(time.perf_counter() - started)
        assert reason.code == "capacity", reason
    total = sum(times)
    print(f"machine: {platform.machine()} {platform.python_implementation()} {platform.python_version()}")
    print(f"{args.nodes} nodes x 8 GPUs, {args.queued} queued: per reason p50 "
          f"{statistics.median(times) * 1e6:.0f} us, p99 {sorted(times)[int(len(times) * 0.99)] * 1e6:.0f} us; "
          f"all {total:.2f} s; one 512-reason round {statistics.mean(times) * 512:.2f} s")


if __name__ == "__main__":
    main()
