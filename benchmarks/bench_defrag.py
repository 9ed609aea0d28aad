"""Benchmark: the consolidation plan (dry run) of the openb pool after churn.

Registers the Alibaba openb node list (1,213 nodes, 6,212 GPUs) once, fills it (untimed) to
``--fill`` of its TFLOPS with openb pods (as bench_decide), then releases random allocations until
``--target`` is left (untimed: the churn that leaves nodes partly used), and times
``consolidation.plan`` for each budget of moves. Prints what each plan gains (nodes emptied, busy
nodes and unallocatable GPU before and after) and its cost: the thread's CPU time (the VM is
shared; ``wall`` is wall clock). With ``--start`` it also times what the writer pays to start a
campaign with that budget (``process`` of a StartDefrag on a copy of the state with a warm
Scheduler: the plan, a DefragStarted and a MoveReserved per move, folded) and what folding those
events costs a replay.

    python3 benchmarks/bench_defrag.py [--budgets 10,100,1000] [--fill 0.6] [--target 0.3] [--reps 3] [--start]
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
from services.allocator.domain import (
    ClusterState,
    Scheduler,
    decode_snapshot,
    digest,
    encode_snapshot,
    evolve,
    process,
    profile,
)
from services.allocator.domain.consolidation import Budget, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="10,100,1000")
    parser.add_argument("--fill", type=float, default=0.6, help="GPU TFLOPS utilisation to fill to")
    parser.add_argument("--target", type=float, default=0.3, help="utilisation left after the releases")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--start", action="store_true", help="also time StartDefrag decided and replayed")
    args = parser.parse_args()
    scheduler = Scheduler()
    driver = Driver(build(1, profile.DEFAULT_STRATEGY, scheduler), scheduler, args.fill, seed=7)
    driver.fill()
    state = driver.state
    while driver.order and driver.used > args.target * driver.cap:
        aid = driver.order[driver.rng.randrange(len(driver.order))]
        driver.account(process(state, it.ReleaseAllocation(intent_id=f"churn-{aid}", allocation_id=aid), NOW,
                               scheduler))
    busy = sum(1 for n in state.nodes.values() if n.workers)
    print(f"# bench_defrag on {platform.node()} ({platform.processor() or platform.machine()}), Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; openb 1x: {len(state.gpus)} GPUs, "
          f"{utilisation(state):.0%} TFLOPS used, {len(state.allocations)} allocations, {busy} busy nodes")
    for moves in (int(b) for b in args.budgets.split(",")):
        cpu, wall = [], []
        for _ in range(args.reps):
            start, start_cpu = time.perf_counter(), time.thread_time()
            result = plan(state, POOL, Budget(max_moves=moves), NOW, scheduler)
            cpu.append(time.thread_time() - start_cpu)
            wall.append(time.perf_counter() - start)
        b, a = result.before, result.after
        print(f"max_moves {moves:>5}: moves={len(result.moves)} nodes_emptied={len(result.nodes_emptied)} "
              f"busy {b.busy_nodes}->{a.busy_nodes} unallocatable_gpu {b.fragmented_milli_gpu / 1000:.1f}->"
              f"{a.fragmented_milli_gpu / 1000:.1f} skipped={len(result.skipped)}  "
              f"cpu_p50_s={statistics.median(cpu):.2f} wall_p50_s={statistics.median(wall):.2f}", flush=True)
        if args.start:
            _start(state, moves, args.reps)


def _start(state: ClusterState, moves: int, reps: int) -> None:
    """Time process(StartDefrag) on a copy of ``state`` (warm Scheduler) and the fold of its events."""
    decide_cpu, fold_cpu, made = [], [], 0
    for rep in range(reps):
        copy, replica = decode_snapshot(encode_snapshot(state)), decode_snapshot(encode_snapshot(state))
        scheduler = Scheduler()
        scheduler.sync(copy)
        start_cpu = time.thread_time()
        events = process(copy, it.StartDefrag(intent_id=f"bench-{moves}-{rep}", pool=POOL, max_moves=moves), NOW,
                         scheduler)
        decide_cpu.append(time.thread_time() - start_cpu)
        start_cpu = time.thread_time()
        for event in events:
            evolve(replica, event)
        fold_cpu.append(time.thread_time() - start_cpu)
        assert digest(replica) == digest(copy)
        made = sum(1 for e in events if isinstance(e, ev.MoveReserved))
    print(f"    start_defrag max_moves {moves:>5}: reserved={made} "
          f"decide_cpu_p50_s={statistics.median(decide_cpu):.3f} "
          f"replay_fold_cpu_p50_ms={1000 * statistics.median(fold_cpu):.2f}", flush=True)


if __name__ == "__main__":
    main()
