"""Benchmark: the liveness tick's time-based-block check (domain/unblocked.py) on a full pool.

Registers the Alibaba node list (1,213 nodes, 6,212 GPUs, replicated by ``--scales``), fills the
pool (untimed, bench_decide's saturated warm-up) until ``--waiting`` requests wait, then gives
every granted allocation ``tensor-fusion.ai/eviction-protection: 30m`` (in the projection directly,
its index rebuilt: the worst case is a protection on each allocation) and one critical request
waits, so every allocation is a candidate. With the last check set to now (nothing ended since),
``unblocked.pools`` finds nothing: the tick's cost when it publishes nothing. Then the same 31
minutes later, every protection ended (the first one found says due). Prints thread CPU time per
call, p50/p99/max microseconds.

    python3 benchmarks/bench_unblocked.py [--scales 1] [--calls 200] [--waiting 500]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_decide import NOW, Driver, build
from events import intents as it
from events.values import AllocationSpec
from services.allocator.domain import Scheduler, process, profile, unblocked
from services.allocator.domain.model import GRANTED
from services.allocator.domain.state import ClusterState
from services.allocator.domain.victims import PROTECTION_KEY


def full(scale: int, waiting: int) -> ClusterState:
    """The openb pool at ``scale``, every GPU that can take work taken and ``waiting`` requests queued,
    every granted allocation protected for 30 minutes and a critical request waiting."""
    scheduler = Scheduler()
    driver = Driver(build(scale, profile.DEFAULT_STRATEGY, scheduler), scheduler, 1.0, 7, waiting, alternate=True)
    driver.fill()
    state = driver.state
    for allocation in state.allocations.values():
        if allocation.status == GRANTED:
            allocation.spec = msgspec.structs.replace(allocation.spec, attributes={PROTECTION_KEY: "30m"})
    state.deadlines.rebuild(state.allocations.values())  # the index evolve keeps, as if granted protected
    spec = next(a.spec for a in state.allocations.values() if a.status == GRANTED)
    critical: AllocationSpec = msgspec.structs.replace(spec, allocation_id="critical", qos="critical",
                                                       attributes={})
    process(state, it.RequestAllocation(intent_id="critical", spec=critical), NOW, scheduler)
    return state


def timed(state: ClusterState, calls: int, now: datetime) -> tuple[list[float], tuple[str, ...]]:
    """Thread CPU seconds of each of ``calls`` calls of ``unblocked.pools(state, now)``, and its answer."""
    out: list[float] = []
    found: tuple[str, ...] = ()
    for _ in range(calls):
        start = time.thread_time()
        found = unblocked.pools(state, now)
        out.append(time.thread_time() - start)
    return out, found


def line(label: str, cpu: list[float], found: tuple[str, ...]) -> str:
    q = statistics.quantiles(cpu, n=100)
    return (f"{label}  p50_us={statistics.median(cpu) * 1e6:,.1f}  p99_us={q[98] * 1e6:,.1f}  "
            f"max_us={max(cpu) * 1e6:,.1f}  pools={len(found)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--waiting", type=int, default=500)
    args = parser.parse_args()
    print(f"# bench_unblocked on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}")
    for scale in (int(s) for s in args.scales.split(",")):
        state = full(scale, args.waiting)
        granted = sum(1 for a in state.allocations.values() if a.status == GRANTED)
        state.checked_at = NOW  # nothing ended since: every allocation is read
        quiet, found = timed(state, args.calls, NOW)
        print(line(f"{scale:>3}x  allocations={granted:,}  queued={len(state.queue)}  none-ended", quiet, found))
        later = NOW + timedelta(minutes=31)  # every protection ended: the first allocation read says due
        ended, found = timed(state, args.calls, later)
        print(line(f"{scale:>3}x  allocations={granted:,}  queued={len(state.queue)}  all-ended ", ended, found))


if __name__ == "__main__":
    main()
