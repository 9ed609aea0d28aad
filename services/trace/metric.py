"""The paper's metrics: unallocated GPU % against arrived demand, and cluster fragmentation.

Unallocated % at arrived x (the simulator's ``merge_alloc_discrete.py``): after every
pod attempt record (arrived milli-GPU, allocated milli-GPU); arrive% = round(arrived / capacity ×
100); alloc% at x is the mean allocated % over the records with arrive% = x (or, when there are
none, within x ± 1); unallocated = 100 − alloc%. Fragmentation (``ClusterGpuFragReport``):
F(M) = Σ_n F_n(M) over the nodes, reported against capacity and against idle GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import msgspec

from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.fragmentation import Workload, node_fragment
from services.allocator.domain.strategies.paper import cpu_free, free_milli

REPORT_POINTS = (100, 110, 130)
"""Arrived percentages reported by ``trace experiment``."""


class Fragmentation(msgspec.Struct, frozen=True, kw_only=True):
    """Cluster fragmentation F(M), idle GPU and capacity, all in milli-GPU."""

    frag_milli: float
    idle_milli: int
    capacity_milli: int

    @property
    def frag_pct_of_capacity(self) -> float:
        """F / capacity × 100 (the paper's "Frag/Total")."""
        return 100 * self.frag_milli / self.capacity_milli if self.capacity_milli else 0.0

    @property
    def frag_pct_of_idle(self) -> float:
        """F / idle × 100 (the paper's "Frag rate")."""
        return 100 * self.frag_milli / self.idle_milli if self.idle_milli else 0.0


def unallocated_curve(arrived: Sequence[int], used: Sequence[int], *, capacity_milli: int,
                      points: Sequence[int] = tuple(range(131))) -> dict[int, float]:
    """Unallocated % (of capacity) at each arrived % in ``points`` that has records nearby.

    ``arrived[i]``/``used[i]`` are milli-GPU after the i-th pod attempt. Raises ValueError when
    the two sequences differ in length or capacity is not positive.
    """
    if len(arrived) != len(used):
        raise ValueError(f"arrived has {len(arrived)} records, used has {len(used)}")
    if capacity_milli <= 0:
        raise ValueError(f"capacity_milli must be positive, got {capacity_milli}")
    buckets: dict[int, list[float]] = defaultdict(list)
    for a, u in zip(arrived, used, strict=True):
        buckets[round(a * 100 / capacity_milli)].append(u * 100 / capacity_milli)
    out: dict[int, float] = {}
    for x in points:
        values = buckets.get(x) or [v for k in (x - 1, x, x + 1) for v in buckets.get(k, ())]
        if values:
            out[x] = 100 - sum(values) / len(values)
    return out


def cluster_fragmentation(state: ClusterState, workload: Workload) -> Fragmentation:
    """F(M) of every node in ``state`` against ``workload`` (strategies/fragmentation.py)."""
    frag = 0.0
    idle = 0
    capacity = 0
    for node in state.nodes.values():
        members = [state.gpus[n] for n in node.gpus if n in state.gpus]
        if not members:
            continue
        free = [free_milli(g) for g in members]
        idle += sum(free)
        capacity += 1000 * len(members)
        frag += node_fragment(free, cpu_free=cpu_free(node), model=members[0].spec.model, workload=workload)
    return Fragmentation(frag_milli=frag, idle_milli=idle, capacity_milli=capacity)
