"""FGD: fragmentation gradient descent (Weng et al., ATC'23; simulator ``fgd_score.go``).

For every feasible node, the hypothetical placement that raises the node's fragmentation
F_n(M) (plugins/fragmentation.py) the least: a share tries each fitting GPU (lowest index on
ties), whole GPUs take the lowest-index free ones, a CPU-only request takes only CPU. The node
score is the simulator's integer ⌊100·sigmoid(−Δ/1000)⌋ (Δ in milli-GPU), highest wins, first
node in name order on ties. The target workload M comes from the Scheduler (``with_workload``):
the pool's learned mix in the service (domain/target.py), the trace's typical pods in the
experiment. Ranks read only the node and the request shape, so the Scheduler caches them per
shape and re-ranks only nodes evolve touched (rank_cache.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Self

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.plugins.fragmentation import FragmentCache, Workload
from services.allocator.domain.plugins.workload import DEFAULT_WORKLOAD
from services.allocator.domain.strategies_paper import (
    PaperStrategy,
    cpu_free,
    cpu_only,
    free_milli,
    gpu_order,
    pick_default,
    share_milli,
)


def sigmoid_score(delta: float) -> int:
    """⌊100 / (1 + e^(Δ/1000))⌋: 50 for Δ = 0, towards 100 as fragmentation falls."""
    x = delta / 1000
    if x > 700:
        return 0
    return math.floor(100 / (1 + math.exp(x)))


class Option:
    """The best hypothetical placement on one node: Δ fragmentation (milli-GPU) and the GPUs."""

    __slots__ = ("delta", "gpus")

    def __init__(self, delta: float, gpus: list[GpuState]) -> None:
        self.delta = delta
        self.gpus = gpus


class Fgd(PaperStrategy):
    """Fragmentation gradient descent against the workload ``workload`` (task classes, Σ p = 1)."""

    name: ClassVar[str] = "fgd"
    cpu_aware: ClassVar[bool] = False
    targets_workload: ClassVar[bool] = True

    def __init__(self, workload: Workload = DEFAULT_WORKLOAD) -> None:
        self.workload = workload
        self.cache = FragmentCache(workload, cpu_aware=self.cpu_aware)

    def with_workload(self, workload: Workload) -> Self:
        """A fresh instance (empty cache) of this strategy against ``workload``."""
        return type(self)(workload)

    def option(self, node: NodeState, members: Sequence[GpuState], cands: Sequence[GpuState], need: Need) -> Option:
        """The placement on ``node`` with the least fragmentation increase."""
        free = [free_milli(g) for g in members]
        model = members[0].spec.model if members else ""
        cpu = cpu_free(node)
        before = self.cache.get(free, cpu_free=cpu, model=model)
        cpu_after = cpu - need.cpu_milli
        if cpu_only(need):
            after = self.cache.get(free, cpu_free=cpu_after, model=model)
            return Option(after - before, pick_default(cands, need))
        if need.count > 1 or need.shared or need.percent >= 100_000:
            chosen = pick_default(cands, need)
            taken = {g.spec.name: share_milli(need, g) for g in chosen}
            free = [r - taken[g.spec.name] if g.spec.name in taken else r for r, g in zip(free, members, strict=True)]
            return Option(self.cache.get(free, cpu_free=cpu_after, model=model) - before, chosen)
        position = {g.spec.name: i for i, g in enumerate(members)}
        best: Option | None = None
        seen: set[int] = set()
        for g in sorted(cands, key=gpu_order):
            i = position[g.spec.name]
            if free[i] in seen:
                continue
            seen.add(free[i])
            trial = list(free)
            trial[i] -= share_milli(need, g)
            delta = self.cache.get(trial, cpu_free=cpu_after, model=model) - before
            if best is None or delta < best.delta:
                best = Option(delta, [g])
        assert best is not None
        return best

    def rank(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> tuple[float, ...]:
        """The simulator's integer score ⌊100·sigmoid(−Δ/1000)⌋ of the node's best option."""
        return (sigmoid_score(self.option(node, members, candidates, need).delta),)

    def pick(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> list[GpuState]:
        """The GPUs of the node's best option."""
        return self.option(node, members, candidates, need).gpus
