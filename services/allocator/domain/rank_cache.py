"""RankCache: scan strategies' node ranks kept per request shape, re-ranked only where evolve touched.

A scan strategy whose rank does not read the allocation id (``per_request = False``) ranks a
node from the node's own records and the request shape alone (less its node-only fields, which
only node-level filters read: those are applied to the ranked nodes at query time). So per (pool, request shape) the
feasible nodes are kept sorted by rank (ties by node name, the scan's tie order); a node evolve
touched (``ClusterState.changes`` since the entry's mark) is re-ranked, or dropped when it no
longer fits, the next time that shape is decided. The best feasible node is then the first entry: the same
answer as scanning every node (tests: ReferenceScheduler equivalence), at the cost of the
touched nodes only. Entries are built on first use by one full scan; at most :data:`LIMIT`
shapes are kept (least recently used dropped first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from sortedcontainers import SortedList

from events.values import AllocationSpec
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need, ShapeKey, shape_key
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies import ScanStrategy
from services.allocator.domain.topology import pick_scan

LIMIT = 1024
"""Request shapes with a cached ranking."""

Ranked = tuple[tuple[float, ...], str]
"""Sort key of a node in an entry: its negated rank, then its name."""
Fit = Callable[[str], list[GpuState] | None]
"""A node's candidates for the request when enough pass every filter, else None."""


class _Entry:
    __slots__ = ("keys", "mark", "order", "pool")

    def __init__(self, pool: str, mark: int) -> None:
        self.pool = pool
        self.mark = mark
        self.order = SortedList()
        self.keys: dict[str, Ranked] = {}

    def put(self, name: str, key: Ranked | None) -> None:
        old = self.keys.get(name)
        if old == key:
            return
        if old is not None:
            del self.keys[name]
            self.order.remove(old)
        if key is not None:
            self.keys[name] = key
            self.order.add(key)


class RankCache:
    """(pool, request shape) -> feasible nodes in rank order, with the nodes to re-rank."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: OrderedDict[ShapeKey, _Entry] = OrderedDict()

    def clear(self) -> None:
        """Forget every ranking (a new state)."""
        self._entries.clear()

    def drop_pool(self, pool: str) -> None:
        """Forget the rankings of ``pool`` (its strategy or target workload changed)."""
        for key in [k for k, e in self._entries.items() if e.pool == pool]:
            del self._entries[key]

    def best(self, state: ClusterState, strategy: ScanStrategy, spec: AllocationSpec, need: Need, chain: Chain,
             ctx: Context, *, fit: Fit, may_hold: Callable[[], Iterable[str]], admits: Callable[[NodeState], bool]
             ) -> tuple[NodeState, list[GpuState]] | None:
        """The node ``strategy`` ranks first among the feasible ones, and the GPUs it picks there.

        ``spec``/``need``/``chain`` are the request without its node-only fields (need.py), so
        requests differing only in those share a ranking; ``admits`` applies the request's own
        node-level filters to the ranked nodes, best first. ``may_hold`` lists the pool's nodes
        that may hold the request (a superset of the feasible ones: the node index's free
        classes), read when a ranking is built."""
        key = shape_key(spec)
        changes = state.changes
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(need.pool, changes.seq)
            stale: Iterable[str] = list(may_hold())
            if len(self._entries) >= LIMIT:
                self._entries.popitem(last=False)
            self._entries[key] = entry
        else:
            self._entries.move_to_end(key)
            stale = list(changes.nodes_since(entry.mark))
            entry.mark = changes.seq
        aid = spec.allocation_id
        for name in stale:
            entry.put(name, self._rank(state, strategy, name, need, ctx, fit, aid))
        for _, name in entry.order:
            node = state.nodes[name]
            if admits(node):
                members = [state.gpus[g] for g in node.gpus]
                cands = chain.node_candidates(node, state.gpus, need, ctx)
                return node, pick_scan(strategy, node, members, cands, need, ctx.config, aid)
        return None

    @staticmethod
    def _rank(state: ClusterState, strategy: ScanStrategy, name: str, need: Need, ctx: Context, fit: Fit,
              aid: str) -> Ranked | None:
        node = state.nodes.get(name)
        if node is None or node.pool != need.pool:
            return None
        cands = fit(name)
        if cands is None:
            return None
        members = [state.gpus[g] for g in node.gpus]
        rank = strategy.rank(node, members, cands, need, ctx.config, aid)
        return tuple(-k for k in rank), name
