"""Per-GPU-model rooms (domain/index.py ``NodeIndex.track_models``): what they cost and what they save.

On the openb cluster (1,213 nodes, 7 GPU models) filled to 75 % of its TFLOPS by ``bench_decide``'s
driver with 500 requests waiting:

1. the cost: ``NodeIndex.refresh`` per node (what every decision pays for each node it touches),
   with only the pool's room and with the pool's per-model rooms kept too (least of 7 passes over
   every node, thread CPU);
2. the saving: ``Scheduler.find`` for a request restricted to a model no GPU of the pool has
   room for (here: a model the pool lacks, as a misspelt ``tensor-fusion.ai/gpu-model`` asks),
   ``--shapes`` distinct shapes so that no known-unfit memo answers: without the per-model rooms
   the first search of a shape walks every node the pool's room admits (timed as that walk,
   ``Scheduler._find``), with them ``find`` walks none.

Usage: ``python3 benchmarks/bench_model_rooms.py [--shapes 50]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decide import Driver, build
from services.allocator.domain import Scheduler
from tests.unit.allocator.builders import Gi, a_request


def filled() -> tuple[Scheduler, object]:
    """A Scheduler and the openb state at 75 % with 500 waiting."""
    scheduler = Scheduler()
    state = build(1, "node-compact-gpu-low-load", scheduler)
    Driver(state, scheduler, 0.75, 7, 500, True).fill()
    scheduler.sync(state)
    return scheduler, state


def refresh_us(scheduler: Scheduler, state: object) -> float:
    """Least µs of thread CPU per ``NodeIndex.refresh`` over every node of the pool."""
    nodes = [state.nodes[n] for n in sorted(state.pool_nodes["default"])]  # type: ignore[attr-defined]
    score = scheduler.strategy(state, "default").node_gpu_score  # type: ignore[arg-type,union-attr]
    config = state.pool_config("default")  # type: ignore[attr-defined]
    best = float("inf")
    for _ in range(7):
        start = time.thread_time()
        for node in nodes:
            scheduler.index.refresh(node, state.gpus, score, config)  # type: ignore[attr-defined]
        best = min(best, time.thread_time() - start)
    return best / len(nodes) * 1e6


def _absent(i: int) -> object:
    return a_request(f"absent-{i}", 1 + i % 30, (1 + i % 7) * Gi, pool="default", gpu_models=("B200",))


def walk_us(scheduler: Scheduler, state: object, shapes: int) -> float:
    """Mean µs of thread CPU of the walk (``Scheduler._find`` over every node the pool's room
    admits) for ``shapes`` requests of a model the pool lacks: what a first search costs without
    the per-model rooms."""
    total = 0.0
    for i in range(shapes):
        spec = _absent(i)
        need, chain = scheduler.prepare(spec)  # type: ignore[arg-type]
        start = time.thread_time()
        assert scheduler._find(state, spec, need, chain, None) is None  # type: ignore[arg-type]
        total += time.thread_time() - start
    return total / shapes * 1e6


def find_us(scheduler: Scheduler, state: object, shapes: int) -> float:
    """Mean µs of thread CPU of ``find`` for ``shapes`` distinct requests of a model the pool lacks
    (the first one also builds the pool's per-model rooms; it is left out)."""
    scheduler.find(state, _absent(shapes))  # type: ignore[arg-type]
    total = 0.0
    for i in range(shapes):
        spec = _absent(i)
        start = time.thread_time()
        assert scheduler.find(state, spec) is None  # type: ignore[arg-type]
        total += time.thread_time() - start
    return total / shapes * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=50)
    args = parser.parse_args()
    scheduler, state = filled()
    print(f"refresh, pool room only: {refresh_us(scheduler, state):.1f} us per node")
    print(f"first search of a shape, model absent, walking: {walk_us(scheduler, state, args.shapes):.0f} us")
    print(f"the same through find, per-model rooms: {find_us(scheduler, state, args.shapes):.1f} us")
    print(f"refresh, pool room + per-model rooms: {refresh_us(scheduler, state):.1f} us per node")

if __name__ == "__main__":
    main()
