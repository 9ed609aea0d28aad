"""Experiment: which free start a MIG template should take (placement quality, not speed).

On one GPU of each family, random arrival sequences of 8 templates (no ``+me``) are placed one by
one under three rules, skipping a template that no longer fits (instance limit, compute slices, no
free slot run): ``first`` (TensorFusion's NVIDIAMIGStrategy: the first free start in the table's
order), ``highest`` (gpuledger: the highest free start) and ``room`` (the start that leaves the
most compute-weighted placements free for every template, ties to the highest). Prints the compute
slices placed in total per rule.

    python3 benchmarks/partition_starts.py [--sequences 10000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.partitions.templates import MigFamily, MigProfile, free_starts, shipped

Held = list[tuple[MigProfile, int]]


def _taken(held: Held) -> list[tuple[int, int]]:
    return [(start, start + p.memory_slices) for p, start in held]


def _room(family: MigFamily, held: Held) -> int:
    return sum(p.compute_slices * len(free_starts(p, _taken(held))) for p in family.profiles)


def placed(family: MigFamily, rule: str, sequence: list[MigProfile]) -> int:
    """Compute slices placed when ``sequence`` arrives on an empty GPU of ``family`` under ``rule``."""
    held: Held = []
    used = 0
    for profile in sequence:
        if sum(1 for p, _ in held if p is profile) >= profile.max_instances:
            continue
        if used + profile.compute_slices > family.compute_slices:
            continue
        starts = free_starts(profile, _taken(held))
        if not starts:
            continue
        if rule == "first":
            start = starts[0]
        elif rule == "highest":
            start = max(starts)
        else:
            start = max(starts, key=lambda s: (_room(family, [*held, (profile, s)]), s))
        held.append((profile, start))
        used += profile.compute_slices
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for family in shipped().families:
        profiles = [p for p in family.profiles if not p.name.endswith("+me")]
        rng = random.Random(args.seed)
        totals = dict.fromkeys(("first", "highest", "room"), 0)
        for _ in range(args.sequences):
            sequence = [rng.choice(profiles) for _ in range(8)]
            for rule in totals:
                totals[rule] += placed(family, rule, sequence)
        print(f"{family.family:<16} " + "  ".join(f"{rule}={total:,}" for rule, total in totals.items()))


if __name__ == "__main__":
    main()
