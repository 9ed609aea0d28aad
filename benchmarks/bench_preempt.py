"""Benchmark: a preemption decision on the openb cluster filled to 100 %, a critical request arriving.

Registers the Alibaba node list (1,213 nodes, 6,212 GPUs, replicated by ``--scales``), fills the
pool (untimed) with openb pods (QoS medium, priority 0) until 500 requests wait in the queue
(nothing more fits), then times ``--decisions`` arrivals of critical requests (priority 100000)
whose shapes are drawn from the same pod list (``--shape whole`` takes one whole GPU each). Each
arrival fits nowhere, so ``decide`` searches a preemption plan; the timed figures are
``decide`` alone (the plan search) and ``process`` (decide, the folds, and the queue drain the
freed leftovers trigger). After each timed arrival the critical allocation is released and the
queue drains again (untimed), so the cluster stays full. Latencies are the thread's CPU time
(the VM is shared). Prints p50/p99/max microseconds, how many arrivals preempted and the mean
number of victims.

    python3 benchmarks/bench_preempt.py [--decisions 300] [--scales 1] [--shape openb|whole]
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

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import openb
from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, PoolConfig, Resources
from services.allocator.domain import ClusterState, Scheduler, decide, process

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POOL = "default"


def filled(scale: int, scheduler: Scheduler, rng: random.Random) -> ClusterState:
    """The openb cluster with pods requested until 500 wait (untimed)."""
    state = ClusterState.empty()
    process(state, it.ConfigurePool(intent_id="pool", pool=POOL, config=PoolConfig()), NOW, scheduler)
    for intent in openb.nodes(pool=POOL, replicas=scale):
        process(state, intent, NOW, scheduler)
    pods = openb.pods(pool=POOL)
    n = 0
    while len(state.queue) < 500:
        n += 1
        spec = msgspec.structs.replace(rng.choice(pods), allocation_id=f"fill-{n}", qos="medium")
        process(state, it.RequestAllocation(intent_id=f"fill-{n}", spec=spec), NOW, scheduler)
    return state


def critical(rng: random.Random, pods: list[AllocationSpec], shape: str, n: int) -> AllocationSpec:
    """A critical request: an openb pod's shape, or one whole GPU."""
    spec = rng.choice(pods)
    if shape == "whole":
        whole = Resources(compute_milli_percent=100_000)
        spec = msgspec.structs.replace(spec, request=whole, limit=whole, gpu_count=1, gpu_models=())
    return msgspec.structs.replace(spec, allocation_id=f"crit-{n}", pod=f"crit-{n}", qos="critical")


def run(scale: int, decisions: int, shape: str, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    scheduler = Scheduler()
    state = filled(scale, scheduler, rng)
    pods = openb.pods(pool=POOL)
    decide_cpu: list[float] = []
    process_cpu: list[float] = []
    victims: list[int] = []
    for n in range(decisions):
        spec = critical(rng, pods, shape, n)
        intent = it.RequestAllocation(intent_id=f"crit-{n}", spec=spec)
        start = time.thread_time()
        decide(state, intent, NOW, scheduler)
        decide_cpu.append(time.thread_time() - start)
        start = time.thread_time()
        out = process(state, intent, NOW, scheduler)
        process_cpu.append(time.thread_time() - start)
        preempted = [e for e in out if isinstance(e, ev.AllocationPreempted) and e.preemptor == spec.allocation_id]
        if preempted:
            victims.append(len(preempted))
        if spec.allocation_id in state.allocations:
            process(state, it.ReleaseAllocation(intent_id=f"rel-{n}", allocation_id=spec.allocation_id), NOW,
                    scheduler)
    used = sum(g.used_milli_tflops for g in state.gpus.values())
    cap = sum(g.spec.capacity.milli_tflops for g in state.gpus.values())
    return {
        "gpus": float(len(state.gpus)), "decisions": float(decisions),
        "decide_p50_us": statistics.median(decide_cpu) * 1e6,
        "decide_p99_us": statistics.quantiles(decide_cpu, n=100)[98] * 1e6,
        "decide_max_us": max(decide_cpu) * 1e6,
        "process_p50_us": statistics.median(process_cpu) * 1e6,
        "process_p99_us": statistics.quantiles(process_cpu, n=100)[98] * 1e6,
        "preempted_share": len(victims) / decisions,
        "victims_mean": statistics.mean(victims) if victims else 0.0,
        "utilisation": used / cap, "queued": float(len(state.queue)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--scales", default="1")
    parser.add_argument("--shape", choices=("openb", "whole"), default="openb")
    args = parser.parse_args()
    print(f"# bench_preempt on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}, shape {args.shape}")
    for scale in (int(s) for s in args.scales.split(",")):
        result = run(scale, args.decisions, args.shape)
        print(f"{scale:>3}x  " + "  ".join(f"{k}={v:,.2f}" if v % 1 else f"{k}={v:,.0f}" for k, v in result.items()),
              flush=True)


if __name__ == "__main__":
    main()
