"""FGD: fragmentation gradient descent (Weng et al., ATC'23; simulator ``fgd_score.go``).

For every feasible node, the hypothetical placement that raises the node's fragmentation
F_n(M) (strategies/fragmentation.py) the least: a share tries each fitting GPU (lowest index on
ties), whole GPUs take the lowest-index free ones, a CPU-only request takes only CPU. The node
score is the simulator's integer ⌊100·sigmoid(−Δ/1000)⌋ (Δ in milli-GPU), highest wins, first
node in name order on ties. The target workload M comes from the Scheduler (``with_workload``):
the pool's learned mix in the service (domain/target.py), the trace's typical pods in the
experiment. Ranks read only the node and the request shape, so the Scheduler caches them per
shape and re-ranks only nodes evolve touched (rank_cache.py).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import ClassVar, Self

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.strategies.fragmentation import FragmentCache, Workload
from services.allocator.domain.strategies.paper import (
    PaperStrategy,
    cpu_free,
    cpu_only,
    free_millis,
    gpu_order,
    pick_default,
    share_milli,
)
from services.allocator.domain.strategies.workload import DEFAULT_WORKLOAD


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


class NodeFrag:
    """What FGD derives from one node whatever the request: free milli per GPU (node order), the
    GPU model, free CPU (millicores), F_n(M) now, and each GPU's position by name."""

    __slots__ = ("before", "cpu", "free", "model", "position", "version")

    def __init__(self, free: list[int], model: str, cpu: int, before: float, members: Sequence[GpuState],
                 version: Hashable) -> None:
        self.free = free
        self.model = model
        self.cpu = cpu
        self.before = before
        self.position = {g.spec.name: i for i, g in enumerate(members)}
        self.version = version


NODE_MEMO_LIMIT = 100_000
"""Nodes whose :class:`NodeFrag` is memoised before the memo is cleared."""


class Fgd(PaperStrategy):
    """Fragmentation gradient descent against the workload ``workload`` (task classes, Σ p = 1)."""

    name: ClassVar[str] = "fgd"
    cpu_aware: ClassVar[bool] = False
    targets_workload: ClassVar[bool] = True

    def __init__(self, workload: Workload = DEFAULT_WORKLOAD) -> None:
        self.workload = workload
        self.cache = FragmentCache(workload, cpu_aware=self.cpu_aware)
        self._nodes: dict[str, NodeFrag] = {}

    def node_frag(self, node: NodeState, members: Sequence[GpuState]) -> NodeFrag:
        """:class:`NodeFrag` of ``node``, memoised under the version ``members`` carries
        (strategies.Members; a plain list is derived afresh every time)."""
        version = getattr(members, "version", None)
        if version is not None:
            found = self._nodes.get(node.name)
            if found is not None and found.version == version:
                return found
        free = free_millis(members)
        model = members[0].spec.model if members else ""
        cpu = cpu_free(node)
        frag = NodeFrag(free, model, cpu, self.cache.get(free, cpu_free=cpu, model=model), members, version)
        if version is not None:
            if len(self._nodes) >= NODE_MEMO_LIMIT:
                self._nodes.clear()
            self._nodes[node.name] = frag
        return frag

    def with_workload(self, workload: Workload) -> Self:
        """A fresh instance (empty cache) of this strategy against ``workload``."""
        return type(self)(workload)

    def option(self, node: NodeState, members: Sequence[GpuState], cands: Sequence[GpuState], need: Need) -> Option:
        """The placement on ``node`` with the least fragmentation increase."""
        frag = self.node_frag(node, members)
        free, model, before = frag.free, frag.model, frag.before
        cpu_after = frag.cpu - need.cpu_milli
        if cpu_only(need):
            after = self.cache.get(free, cpu_free=cpu_after, model=model)
            return Option(after - before, pick_default(cands, need))
        position = frag.position
        share = -(-need.percent // 100) if need.percent else 0  # share_milli of a percent request, any GPU
        if need.count > 1 or need.shared or need.percent >= 100_000:
            chosen = pick_default(cands, need)
            trial = list(free)
            for g in chosen:
                trial[position[g.spec.name]] -= share or share_milli(need, g)
            return Option(self.cache.get(trial, cpu_free=cpu_after, model=model) - before, chosen)
        best: Option | None = None
        seen: set[int] = set()
        for g in sorted(cands, key=gpu_order):
            i = position[g.spec.name]
            if free[i] in seen:
                continue
            seen.add(free[i])
            trial = list(free)
            trial[i] -= share or share_milli(need, g)
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
