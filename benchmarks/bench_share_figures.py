"""Benchmark: the cost of a share read (services.allocator.api.share_status, docs/shares.md).

Builds one pool of ``--nodes`` nodes with 8 GPUs of 100 TFLOPS / 80 GiB each, ``--parents``
department shares each parenting ``--teams`` team shares (one namespace each, guaranteed an equal
part of the pool) plus requests of 1 GPU x 50 TFLOPS from every team until ``--fill`` of the GPUs
are held (the domain decides them, so the grants beyond a team's guarantee are borrowed). Then
times, ``--repeat`` times each: ``share_status.all_figures`` (what GET /api/v1/shares,
/api/v1/status, the gauges and /ui/shares each compute once per request or scrape), the whole
GET /api/v1/shares document list, and one scrape of the share gauges.

    python3 benchmarks/bench_share_figures.py [--nodes 1213] [--parents 4] [--teams 4] [--fill 0.9] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, generate_latest

from events import intents
from events.values import AllocationSpec, GpuSpec, Resources, ShareAmount, SharePool, ShareSpec
from services.allocator import domain
from services.allocator.api import documents, share_status
from services.allocator.api.share_gauges import ShareCollector
from services.allocator.domain.state import ClusterState

GIB = 1 << 30
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def build(nodes: int, parents: int, teams: int, fill: float) -> ClusterState:
    state = ClusterState.empty()
    scheduler = domain.Scheduler()
    for n in range(nodes):
        gpus = tuple(GpuSpec(name=f"n{n}-g{i}", capacity=Resources(milli_tflops=100_000, vram_bytes=80 * GIB),
                             model="A100", index=i) for i in range(8))
        domain.process(state, intents.RegisterNode(intent_id=f"r{n}", node=f"n{n}", pool="default", gpus=gpus), NOW,
                       scheduler)
    leaves = parents * teams
    per_team = nodes * 8 // (leaves + 1)  # a part of the pool stays unreserved: the surplus
    for p in range(parents):
        spec = ShareSpec(pools=(SharePool(pool="default", guaranteed=ShareAmount(gpus=per_team * teams)),))
        domain.process(state, intents.SetShare(intent_id=f"p{p}", name=f"dept-{p}", spec=spec), NOW, scheduler)
        for t in range(teams):
            spec = ShareSpec(namespaces=(f"team-{p}-{t}",), parent=f"dept-{p}", weight=1 + t,
                             pools=(SharePool(pool="default", guaranteed=ShareAmount(gpus=per_team)),))
            domain.process(state, intents.SetShare(intent_id=f"t{p}-{t}", name=f"team-{p}-{t}", spec=spec), NOW,
                           scheduler)
    amount = Resources(milli_tflops=50_000, vram_bytes=8 * GIB)
    for i in range(int(nodes * 8 * fill)):
        p, t = divmod(i % leaves, teams) if i % 3 else (0, 0)  # team-0-0 asks a third of the time: it borrows
        asked = AllocationSpec(allocation_id=f"a{i}", namespace=f"team-{p}-{t}", pod=f"a{i}", pool="default",
                               request=amount, limit=amount)
        domain.process(state, intents.RequestAllocation(intent_id=f"q{i}", spec=asked), NOW, scheduler)
    return state


def _timed(repeat: int, work: Callable[[], object]) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--parents", type=int, default=4)
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--fill", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    started = time.perf_counter()
    state = build(args.nodes, args.parents, args.teams, args.fill)
    built_s = time.perf_counter() - started
    granted = sum(a.status == "granted" for a in state.allocations.values())
    borrowed = sum(a.borrowed for a in state.allocations.values())
    registry = CollectorRegistry()
    registry.register(ShareCollector(lambda: state))
    figures = share_status.all_figures(state)
    rows = {
        "all_figures": _timed(args.repeat, lambda: share_status.all_figures(state)),
        "GET /api/v1/shares documents": _timed(args.repeat, lambda: [
            documents.share_doc(state, n, f) for n, f in share_status.all_figures(state).items()]),
        "share gauges scrape": _timed(args.repeat, lambda: generate_latest(registry)),
    }
    print(f"# {platform.node()} python {platform.python_version()} load {os.getloadavg()[0]:.1f}; "
          f"{args.nodes} nodes, {args.nodes * 8} GPUs, {len(state.shares)} shares, {len(state.allocations)} live "
          f"allocations ({granted} granted, {borrowed} borrowed); built in {built_s:.1f} s")
    assert len(figures) == len(state.shares)
    print("| read | p50 ms | max ms |")
    print("|---|---|---|")
    for name, times in rows.items():
        print(f"| {name} | {statistics.median(times):.1f} | {max(times):.1f} |")


if __name__ == "__main__":
    main()
