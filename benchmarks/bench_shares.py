"""Benchmark: what shares cost a decision, on the openb cluster (docs/allocation.md "Fair share").

The openb pods are spread round-robin over four namespaces ``team-0`` .. ``team-3``; the same
seeded run is timed twice in one process: without shares, then with four shares (one per
namespace) each guaranteed a quarter of the pool's GPUs (no TFLOPS or VRAM set), so that grants
beyond a quarter are borrowed and a team below its quarter reclaims. Each run fills the pool
(untimed, bench_decide's Driver) to the target utilisation, or saturates it (``--saturated N``:
full, N requests waiting, then releases and requests alternate), then times the decisions on
the thread's CPU clock. Prints p50/p99 microseconds, decisions/s, the outcome counts (reclaims
among the preemptions) and ``ratio_to_no_shares``.

    python3 benchmarks/bench_shares.py [--decisions 3000] [--target 0.6] [--saturated 500]
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_decide import NOW, POOL, Driver, build
from events import decisions as ev
from events import intents as it
from events.values import ShareAmount, SharePool, ShareSpec
from services.allocator.domain import Scheduler, process, profile

TEAMS = 4


class TeamDriver(Driver):
    """bench_decide's Driver with each request's namespace set to ``team-<n mod 4>``."""

    def next_intent(self) -> tuple[str, it.AnyIntent]:
        kind, intent = super().next_intent()
        if isinstance(intent, it.RequestAllocation):
            spec = msgspec.structs.replace(intent.spec, namespace=f"team-{self.n % TEAMS}")
            intent = msgspec.structs.replace(intent, spec=spec)
        return kind, intent

    def fill(self) -> None:
        while (self.alternate or self.used <= self.target * self.cap) and len(self.state.queue) < self.waiting:
            _, intent = self.next_intent()
            self.account(process(self.state, intent, NOW, self.scheduler))


def run(decisions: int, target: float, *, shares: bool, waiting: int, saturated: bool) -> dict[str, float]:
    scheduler = Scheduler()
    state = build(1, profile.DEFAULT_STRATEGY, scheduler)
    if shares:
        quarter = len(state.gpus) // TEAMS
        for team in range(TEAMS):
            terms = SharePool(pool=POOL, guaranteed=ShareAmount(gpus=quarter))
            process(state, it.SetShare(intent_id=f"share-{team}", name=f"team-{team}",
                                       spec=ShareSpec(namespaces=(f"team-{team}",), pools=(terms,))), NOW, scheduler)
    driver = TeamDriver(state, scheduler, target, 7, waiting, saturated)
    driver.fill()
    driver.outcomes.clear()
    cpu: list[float] = []
    digest = hashlib.sha256()
    reclaims = 0
    for _ in range(decisions):
        _, intent = driver.next_intent()
        start = time.thread_time()
        out = process(driver.state, intent, NOW, scheduler)
        cpu.append(time.thread_time() - start)
        for event in out:
            digest.update(msgspec.json.encode(event))
            reclaims += isinstance(event, ev.AllocationPreempted) and event.reclaim
        driver.account(out)
    return {
        "decisions": len(cpu), "p50_us": statistics.median(cpu) * 1e6,
        "p99_us": statistics.quantiles(cpu, n=100)[98] * 1e6, "decisions_per_s": len(cpu) / sum(cpu),
        "queued_now": float(len(driver.state.queue)), "reclaims": float(reclaims),
        **{k: float(v) for k, v in sorted(driver.outcomes.items())}, "events_sha256": digest.hexdigest()[:16],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=3000)
    parser.add_argument("--target", type=float, default=0.6, help="GPU TFLOPS utilisation to hold")
    parser.add_argument("--saturated", type=int, default=0, help="requests waiting in a full pool (0: --target)")
    args = parser.parse_args()
    print(f"# bench_shares on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}, " + (f"saturated +{args.saturated}" if args.saturated
                                                      else f"target {args.target:.0%}"))
    base = None
    for shares in (False, True):
        result = run(args.decisions, args.target, shares=shares, waiting=args.saturated or 500,
                     saturated=bool(args.saturated))
        base = base or result["decisions_per_s"]
        result["ratio_to_no_shares"] = result["decisions_per_s"] / base
        label = "4 shares " if shares else "no shares"
        print(label + "  " + "  ".join(f"{k}={v:,.2f}" if k.startswith("ratio") else
                                       f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in result.items()), flush=True)


if __name__ == "__main__":
    main()
