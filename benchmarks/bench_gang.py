"""Benchmark: one gang decision (the quorum-th member's request places the whole quorum) on openb.

Registers the Alibaba openb node list (1,213 nodes, 6,212 GPUs) once, fills it (untimed) to a
target TFLOPS utilisation with openb pods (as bench_decide), then for each quorum Q: sends Q-1
one-GPU members of a fresh gang (untimed, each queued holding nothing), times ``process`` of the
Q-th member (the decision that places all Q on a copy-on-write scratch state and emits Q grants
and a GangPlaced), and releases the gang again (untimed) so every repetition starts at the same
fill. ``--fail`` also times a quorum of 256 eight-GPU members, more than the pool's nodes with
eight idle GPUs can hold: the decision places members until one fails, then explains where. Latency is the thread's
CPU time (the VM is shared); ``wall_*`` is wall clock.

    python3 benchmarks/bench_gang.py [--quorums 8,64,256] [--reps 20] [--target 0.6] [--fail]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_decide import NOW, POOL, Driver, build, utilisation
from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GangSpec, Resources
from services.allocator.domain import ClusterState, Scheduler, process, profile


def member(gang: str, i: int, quorum: int, count: int = 1) -> AllocationSpec:
    """Member ``i`` of gang ``bench/<gang>``: ``count`` whole GPUs (100 % of their compute, 1 GiB each)."""
    share = Resources(compute_milli_percent=100_000, vram_bytes=2**30)
    return AllocationSpec(allocation_id=f"{gang}-{i}", namespace="bench", pod=f"{gang}-{i}", pool=POOL,
                          request=share, limit=share, gpu_count=count,
                          gang=GangSpec(key=f"bench/{gang}", quorum=quorum, desired=quorum))


def one(state: ClusterState, scheduler: Scheduler, gang: str, quorum: int, count: int = 1
        ) -> tuple[float, float, list[ev.AnyEvent]]:
    """(cpu seconds, wall seconds, events) of the quorum-th member's decision; the gang is released after."""
    for i in range(quorum - 1):
        intent = it.RequestAllocation(intent_id=f"{gang}-r{i}", spec=member(gang, i, quorum, count))
        process(state, intent, NOW, scheduler)
    last = it.RequestAllocation(intent_id=f"{gang}-last", spec=member(gang, quorum - 1, quorum, count))
    start, start_cpu = time.perf_counter(), time.thread_time()
    out = process(state, last, NOW, scheduler)
    cpu, wall = time.thread_time() - start_cpu, time.perf_counter() - start
    for i in range(quorum):
        process(state, it.ReleaseAllocation(intent_id=f"{gang}-x{i}", allocation_id=f"{gang}-{i}"), NOW, scheduler)
    return cpu, wall, out


def summary(cpu: list[float], wall: list[float]) -> str:
    p99 = statistics.quantiles(cpu, n=100, method="inclusive")[98] if len(cpu) > 1 else cpu[0]
    return (f"p50_ms={statistics.median(cpu) * 1e3:.1f}  p99_ms={p99 * 1e3:.1f}  max_ms={max(cpu) * 1e3:.1f}  "
            f"wall_p50_ms={statistics.median(wall) * 1e3:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quorums", default="8,64,256")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--target", type=float, default=0.6, help="GPU TFLOPS utilisation to fill to")
    parser.add_argument("--fail", action="store_true", help="also time a quorum that cannot fit")
    args = parser.parse_args()
    scheduler = Scheduler()
    driver = Driver(build(1, profile.DEFAULT_STRATEGY, scheduler), scheduler, args.target, seed=7)
    driver.fill()
    state = driver.state
    idle = sum(1 for g in state.gpus.values() if not g.charges)
    print(f"# bench_gang on {platform.node()} ({platform.processor() or platform.machine()}), Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; openb 1x: {len(state.gpus)} GPUs, "
          f"{utilisation(state):.0%} TFLOPS used, {idle} idle GPUs, {len(state.allocations)} allocations")
    for quorum in (int(q) for q in args.quorums.split(",")):
        cpu, wall = [], []
        for rep in range(args.reps):
            c, w, out = one(state, scheduler, f"g{quorum}-{rep}", quorum)
            assert sum(isinstance(e, ev.AllocationGranted) for e in out) == quorum, out[-1]
            cpu.append(c)
            wall.append(w)
        print(f"quorum {quorum:>4} placed   reps={args.reps}  {summary(cpu, wall)}", flush=True)
    if args.fail:
        cpu, wall = [], []
        for rep in range(max(1, args.reps // 4)):
            c, w, out = one(state, scheduler, f"fail-{rep}", 256, count=8)
            assert isinstance(out[0], ev.AllocationQueued), out[0]
            cpu.append(c)
            wall.append(w)
        placed = out[0].reason.split(" placed before it")[0].rsplit(" ", 1)[-1]
        print(f"quorum  256 x 8 GPUs, no room ({placed} placed before one failed)  reps={len(cpu)}  "
              f"{summary(cpu, wall)}", flush=True)


if __name__ == "__main__":
    main()
