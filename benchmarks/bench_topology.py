"""Benchmark: what topology data costs a decision (bench_decide's driver, with and without topology).

Runs ``bench_decide.run`` on the openb cluster twice per round, alternating: once as reported
(no NUMA node, no interconnect group: the topology choice falls through to the strategy after
one scan of the candidates) and once with topology on every GPU (the node's GPUs split in two
NUMA halves by index, and NVLink pairs on nodes of four GPUs or more), so every pick goes through
the topology choice (least damage for one GPU, best tier for several). Prints p50/p99 CPU
microseconds per decision and decisions/s per variant and round.

    python3 benchmarks/bench_topology.py [--decisions 4000] [--rounds 3] [--strategy NAME]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_decide, openb
from events import intents as it

PLAIN = openb.nodes


def with_topology(**kw: Any) -> Iterator[it.RegisterNode]:
    """openb nodes with NUMA halves and NVLink pairs (nodes of four GPUs or more)."""
    for intent in PLAIN(**kw):
        n = len(intent.gpus)
        gpus = tuple(msgspec.structs.replace(g, numa_node=i * 2 // n,
                                             interconnect_group=f"nv{i // 2}" if n >= 4 else "")
                     for i, g in enumerate(intent.gpus))
        yield msgspec.structs.replace(intent, gpus=gpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.6)
    parser.add_argument("--strategy", default="node-compact-gpu-low-load")
    args = parser.parse_args()
    for r in range(args.rounds):
        for name, source in (("none", PLAIN), ("numa+nvlink", with_topology)):
            setattr(openb, "nodes", source)  # bench_decide.build registers openb.nodes()  # noqa: B010
            row = bench_decide.run(1, args.decisions, args.target, args.strategy)
            print(f"round={r} topology={name:<11} p50_us={row['p50_us']:.1f} p99_us={row['p99_us']:.1f} "
                  f"decisions_per_s={row['decisions_per_s']:,.0f}")


if __name__ == "__main__":
    main()
