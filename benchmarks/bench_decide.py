"""Benchmark: decide+evolve latency on the openb cluster at 1x, 4x and 16x its size, per strategy.

Registers the Alibaba node list (1,213 nodes, 6,212 GPUs) as RegisterNode intents, replicated,
configures the pool's placement strategy, fills it (untimed) to a target TFLOPS utilisation with
RequestAllocation drawn from openb_pod_list_default.csv, then times 10,000 decisions: requests
while below the target, releases of random live allocations while above it (releases also grant
queued requests). One long-lived Scheduler per run, as in the service. Prints p50/p99
microseconds per decision, decisions/s, and each strategy's decisions/s as a ratio to the
default strategy's at the same scale in the same run. Latencies are the thread's CPU time per
decision (the VM is shared: wall time counts other processes' turns too); ``wall_*`` are wall
clock. ``events_sha256``: the first 16 hex digits of a SHA-256 over the timed decisions' events
(msgspec JSON, in order): equal before and after a change exactly when its decisions are.

Saturated mode (``--saturated 500,5000``, issue 27): for each queue length, the cluster is filled
(untimed) until every GPU that can take work is taken and that many requests wait, then releases
and new requests alternate strictly (one release of a random live allocation, one new request),
preemption on as by default; each such run is printed beside a run of the same strategy and
scale at 60 % (``ratio_to_60``: its decisions/s over the 60 % run's).

    python3 benchmarks/bench_decide.py [--decisions 10000] [--scales 1,4,16] [--target 0.75]
        [--strategy NAME ...]   (repeatable; "all" for every registered strategy; default: the default)
        [--saturated 500,5000]  (queue lengths; replaces --target with the 60 %% / saturated pairs)
        [--keep-heap]           (as the allocator: lifecycle.HeapKeeper settled after the fill,
                                 tended after each decision, untimed; ``tend_max_us`` its longest)
"""

from __future__ import annotations

import argparse
import hashlib
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
from events.values import PoolConfig
from services.allocator.domain import ClusterState, Scheduler, process, profile
from services.shared.lifecycle import HeapKeeper

NOW = datetime(2026, 1, 1, tzinfo=UTC)


POOL = "default"


def build(scale: int, strategy: str, scheduler: Scheduler) -> ClusterState:
    state = ClusterState.empty()
    config = PoolConfig(placement=strategy)
    process(state, it.ConfigurePool(intent_id="pool", pool=POOL, config=config), NOW, scheduler)
    for intent in openb.nodes(pool=POOL, replicas=scale):
        process(state, intent, NOW, scheduler)
    return state


def utilisation(state: ClusterState) -> float:
    cap = sum(g.spec.capacity.milli_tflops for g in state.gpus.values())
    used = sum(g.used_milli_tflops for g in state.gpus.values())
    return used / cap


class Driver:
    """Holds the cluster near a target utilisation: requests when below it, releases when above."""

    def __init__(self, state: ClusterState, scheduler: Scheduler, target: float, seed: int,
                 waiting: int = 500, alternate: bool = False) -> None:
        self.state, self.scheduler, self.target = state, scheduler, target
        self.waiting, self.alternate = waiting, alternate
        self.pods = openb.pods()
        self.rng = random.Random(seed)
        self.live: dict[str, int] = {}
        self.order: list[str] = []
        self.used = 0
        self.cap = sum(g.spec.capacity.milli_tflops for g in state.gpus.values())
        self.outcomes: dict[str, int] = {}
        self.n = 0

    def next_intent(self) -> tuple[str, it.AnyIntent]:
        self.n += 1
        if self.alternate:
            # one release, one request; a release turn requests instead while fewer than ``waiting`` wait
            release = self.n % 2 == 0 and bool(self.order) and len(self.state.queue) >= self.waiting
        else:
            release = bool(self.order) and (self.used > self.target * self.cap or len(self.state.queue) >= self.waiting)
        if release:
            aid = self.order.pop(self.rng.randrange(len(self.order)))
            return "release", it.ReleaseAllocation(intent_id=f"rel-{self.n}", allocation_id=aid)
        spec = self.rng.choice(self.pods)
        spec = msgspec.structs.replace(spec, allocation_id=f"{spec.allocation_id}-{self.n}")
        return "request", it.RequestAllocation(intent_id=f"req-{self.n}", spec=spec)

    def account(self, out: list[ev.AnyEvent]) -> None:
        for e in out:
            name = type(e).__name__
            self.outcomes[name] = self.outcomes.get(name, 0) + 1
            if isinstance(e, ev.AllocationGranted):
                taken = sum(c.milli_tflops for c in e.charges)
                self.live[e.spec.allocation_id] = taken
                self.order.append(e.spec.allocation_id)
                self.used += taken
            elif isinstance(e, ev.AllocationReleased | ev.AllocationPreempted):
                self.used -= self.live.pop(e.allocation_id, 0)
                if e.allocation_id in self.order:
                    self.order.remove(e.allocation_id)

    def fill(self) -> None:
        """Untimed warm-up: request until the target utilisation is reached (or ``waiting`` requests
        wait); saturated (``alternate``): request until ``waiting`` requests wait."""
        while (self.alternate or self.used <= self.target * self.cap) and len(self.state.queue) < self.waiting:
            self.n += 1
            spec = self.rng.choice(self.pods)
            spec = msgspec.structs.replace(spec, allocation_id=f"{spec.allocation_id}-{self.n}")
            intent = it.RequestAllocation(intent_id=f"req-{self.n}", spec=spec)
            self.account(process(self.state, intent, NOW, self.scheduler))


def run(scale: int, decisions: int, target: float, strategy: str, seed: int = 7, *,
        waiting: int = 500, saturated: bool = False, keep_heap: bool = False) -> dict[str, float]:
    scheduler = Scheduler()
    driver = Driver(build(scale, strategy, scheduler), scheduler, target, seed, waiting, saturated)
    driver.fill()
    driver.outcomes.clear()
    heap = HeapKeeper() if keep_heap else None
    tends: list[float] = [0.0]
    if heap is not None:
        heap.settle()  # as the allocator does once its state is loaded
    wall: list[float] = []
    cpu: list[float] = []
    requests: list[float] = []
    digest = hashlib.sha256()
    for _ in range(decisions):
        kind, intent = driver.next_intent()
        start, start_cpu = time.perf_counter(), time.thread_time()
        out = process(driver.state, intent, NOW, scheduler)
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
        if kind == "request":
            requests.append(cpu[-1])
        for event in out:
            digest.update(msgspec.json.encode(event))
        driver.account(out)
        if heap is not None:  # as the allocator's loop between batches
            start_cpu = time.thread_time()
            heap.tend()
            tends.append(time.thread_time() - start_cpu)
    return {
        "gpus": len(driver.state.gpus), "decisions": len(cpu),
        "p50_us": statistics.median(cpu) * 1e6,
        "p99_us": statistics.quantiles(cpu, n=100)[98] * 1e6,
        "max_us": max(cpu) * 1e6,
        "request_p99_us": statistics.quantiles(requests, n=100)[98] * 1e6,
        "decisions_per_s": len(cpu) / sum(cpu),
        "wall_p50_us": statistics.median(wall) * 1e6,
        "wall_p99_us": statistics.quantiles(wall, n=100)[98] * 1e6,
        "utilisation": utilisation(driver.state),
        "queued_now": float(len(driver.state.queue)),
        **{k: float(v) for k, v in sorted(driver.outcomes.items())},
        "events_sha256": digest.hexdigest()[:16],
        **({"tend_max_us": max(tends) * 1e6} if heap is not None else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--scales", default="1,4,16")
    parser.add_argument("--target", type=float, default=0.75, help="GPU TFLOPS utilisation to hold")
    parser.add_argument("--strategy", action="append", default=[],
                        help="placement strategy (repeatable; 'all' for every registered one)")
    parser.add_argument("--keep-heap", action="store_true",
                        help="settle and tend the heap as the allocator does (lifecycle.HeapKeeper)")
    parser.add_argument("--saturated", default="",
                        help="queue lengths (e.g. 500,5000): saturated runs beside a 60%% run of each strategy")
    args = parser.parse_args()
    names = sorted(profile.STRATEGIES) if "all" in args.strategy else args.strategy or [profile.DEFAULT_STRATEGY]
    unknown = [n for n in names if n not in profile.STRATEGIES]
    if unknown:
        parser.error(f"unknown strategy {unknown[0]!r}; known: {', '.join(sorted(profile.STRATEGIES))}")
    if profile.DEFAULT_STRATEGY in names:
        names = [profile.DEFAULT_STRATEGY] + [n for n in names if n != profile.DEFAULT_STRATEGY]
    print(f"# bench_decide on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}, target {args.target:.0%}")
    if args.saturated:
        saturated(args, names)
        return
    for scale in (int(s) for s in args.scales.split(",")):
        baseline = None
        for name in names:
            result = run(scale, args.decisions, args.target, name, keep_heap=args.keep_heap)
            if name == profile.DEFAULT_STRATEGY:
                baseline = result["decisions_per_s"]
            if baseline:
                result["ratio_to_default"] = result["decisions_per_s"] / baseline
            print(f"{scale:>3}x  {name:<26}  " + "  ".join(
                f"{k}={v:,.2f}" if k == "ratio_to_default" else f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
                for k, v in result.items()), flush=True)


def _line(label: str, result: dict[str, float]) -> str:
    return label + "  ".join(
        f"{k}={v:,.2f}" if k.startswith("ratio") else f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
        for k, v in result.items())


def saturated(args: argparse.Namespace, names: list[str]) -> None:
    """Per scale and strategy: a 60 % run, then one saturated run per queue length."""
    waits = [int(w) for w in args.saturated.split(",")]
    for scale in (int(s) for s in args.scales.split(",")):
        for name in names:
            base = run(scale, args.decisions, 0.6, name, keep_heap=args.keep_heap)
            print(_line(f"{scale:>3}x  {name:<16}  60%      ", base), flush=True)
            for waiting in waits:
                result = run(scale, args.decisions, 1.0, name, waiting=waiting, saturated=True,
                             keep_heap=args.keep_heap)
                result["ratio_to_60"] = result["decisions_per_s"] / base["decisions_per_s"]
                print(_line(f"{scale:>3}x  {name:<16}  full+{waiting:<5}", result), flush=True)


if __name__ == "__main__":
    main()
