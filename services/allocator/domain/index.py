"""NodeIndex: per pool, nodes ordered by their strategy score, plus per-node free-capacity maxima.

Kept up to date by ``evolve`` (``refresh`` after any change to a node's GPUs or the pool
settings), so a decision walks nodes best-first and skips a node whose largest free share cannot
hold the request without looking at its GPUs. Never serialised: rebuilt from a snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sortedcontainers import SortedList

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.units import PERCENT_SCALE

ScoreFn = Callable[[GpuState, PoolConfig], int]


class NodeFree:
    """Largest free amounts on one node's GPUs: milli-TFLOPS, bytes, milli-percent, idle GPU count."""

    __slots__ = ("idle", "pct", "tflops", "vram")

    def __init__(self, gpus: list[GpuState]) -> None:
        self.tflops = max((g.available_milli_tflops for g in gpus), default=0)
        self.vram = max((g.available_vram_bytes for g in gpus), default=0)
        self.pct = max(
            (g.available_milli_tflops * PERCENT_SCALE // g.spec.capacity.milli_tflops
             for g in gpus if g.spec.capacity.milli_tflops > 0),
            default=0,
        )
        self.idle = sum(1 for g in gpus if not g.charges)

    def may_fit(self, need: Need) -> bool:
        """False only when no GPU of the node can hold one share of ``need`` (exact, conservative)."""
        if need.shared:
            return self.idle >= need.count
        if need.percent:
            if self.pct < need.percent:
                return False
        elif self.tflops < need.tflops:
            return False
        return self.vram >= need.vram


class NodeIndex:
    """Pool -> SortedList of (−node score, node name); node -> (key, NodeFree)."""

    __slots__ = ("_keys", "_pools", "free")

    def __init__(self) -> None:
        self._pools: dict[str, SortedList] = {}
        self._keys: dict[str, tuple[str, tuple[int, str]]] = {}
        self.free: dict[str, NodeFree] = {}

    def refresh(self, node: NodeState, gpus: dict[str, GpuState], score: ScoreFn, config: PoolConfig) -> None:
        """Recompute ``node``'s score and free maxima and re-place it in its pool's order."""
        self.drop(node.name)
        members = [gpus[name] for name in node.gpus if name in gpus]
        self.free[node.name] = NodeFree(members)
        total = sum(score(g, config) for g in members)
        key = (-(total // len(members)) if members else 0, node.name)
        self._pools.setdefault(node.pool, SortedList()).add(key)
        self._keys[node.name] = (node.pool, key)

    def drop(self, node_name: str) -> None:
        """Forget a node (removed, or about to be re-placed)."""
        entry = self._keys.pop(node_name, None)
        self.free.pop(node_name, None)
        if entry is not None:
            self._pools[entry[0]].remove(entry[1])

    def ordered(self, pool: str) -> Iterator[str]:
        """Node names of ``pool``, best score first, ties by name."""
        for _, name in self._pools.get(pool, ()):
            yield name

    def sort_key(self, node_name: str) -> tuple[int, str]:
        """The ordering key of a node (for ordering a subset the same way)."""
        return self._keys[node_name][1]
