"""A/B of the saturated decision loop between source trees, interleaved, on one shared machine.

For each tree (a checkout or ``git worktree`` of this repository) and repetition, a fresh Python
process builds the openb cluster (``bench_decide.build``), fills it until ``--waiting`` requests
wait (``Driver.fill``, alternating releases and requests as ``bench_decide --saturated``), then
times ``--decisions`` decisions with the thread's CPU clock and prints the total. The trees run in
turn, repetition by repetition, so the machine's load falls on each alike; the least total of the
repetitions is reported per tree (the run least disturbed by other processes), with every total.
On a 2-core machine shared with other work, differences under ~5 % are noise.

    python3 benchmarks/ab_saturated.py TREE [TREE ...] [--scale 1] [--waiting 500]
        [--strategy node-compact-gpu-low-load] [--decisions 1000] [--reps 3] [--target 0.6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import sys, time
sys.path.insert(0, ".")
from benchmarks.bench_decide import NOW, Driver, build
from services.allocator.domain import Scheduler, process
scheduler = Scheduler()
driver = Driver(build({scale}, {strategy!r}, scheduler), scheduler, {target}, 7, {waiting}, {saturated})
driver.fill()
total = 0.0
for _ in range({decisions}):
    kind, intent = driver.next_intent()
    start = time.thread_time()
    out = process(driver.state, intent, NOW, scheduler)
    total += time.thread_time() - start
    driver.account(out)
print(total)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--waiting", type=int, default=500)
    parser.add_argument("--strategy", default="node-compact-gpu-low-load")
    parser.add_argument("--decisions", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--target", type=float, default=None,
                        help="instead of saturated: hold this TFLOPS utilisation (bench_decide's 60 %% mode: 0.6)")
    args = parser.parse_args()
    saturated = args.target is None
    code = CHILD.format(scale=args.scale, strategy=args.strategy, waiting=args.waiting, decisions=args.decisions,
                        target=0.75 if saturated else args.target, saturated=saturated)
    totals: dict[str, list[float]] = {tree: [] for tree in args.trees}
    for _ in range(args.reps):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                                  check=True)
            totals[tree].append(float(done.stdout.split()[-1]))
    regime = f"full + {args.waiting}" if saturated else f"{args.target:.0%} utilisation"
    print(f"# {args.decisions} decisions, {args.scale}x, {regime}, {args.strategy}: "
          "thread CPU seconds, least of the repetitions (all)")
    for tree, values in totals.items():
        print(f"{tree}  {min(values):.3f}  ({', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main()
