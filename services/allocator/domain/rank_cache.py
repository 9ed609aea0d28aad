"""RankCache: scan strategies' node ranks kept per request shape, re-ranked only where evolve touched.

A scan strategy whose rank does not read the allocation id (``per_request = False``) ranks a
node from the node's own records and the request shape alone (less its node-only fields, which
only node-level filters read: those are applied to the ranked nodes at query time). So per (pool, request shape) the
feasible nodes are kept sorted by rank (ties by node name, the scan's tie order); a node evolve
touched (``ClusterState.changes`` since the entry's mark) is re-ranked, or dropped when it no
longer fits, the next time that shape is decided (a heap with lazily dropped outdated keys: a
re-rank is a push, not a sorted-list removal and insertion). The best feasible node is then the
first entry: the same
answer as scanning every node (tests: ReferenceScheduler equivalence), at the cost of the
touched nodes only. Entries are built on first use by one full scan; at most :data:`LIMIT`
shapes are kept (least recently used dropped first).

Per node the cache also keeps, until evolve touches it again, its GPUs as a
:class:`~services.allocator.domain.strategies.Members` list (whose version lets a strategy
memoise what it derives from the node across request shapes) and the positions of its GPU
candidates per GPU shape (``need.gpu_shape_key``: requests differing only in CPU share them).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from operator import neg

from events.values import AllocationSpec
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.index import NodeFree
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need, ShapeKey, gpu_shape_key, shape_key
from services.allocator.domain.state import Changes, ClusterState
from services.allocator.domain.strategies.base import Members, ScanStrategy
from services.allocator.domain.topology import pick_scan

LIMIT = 1024
"""Request shapes with a cached ranking."""

Ranked = tuple[tuple[float, ...], str]
"""Sort key of a node in an entry: its negated rank, then its name."""


class _Entry:
    """One shape's ranking: ``keys`` node -> its current sort key; ``heap`` a min-heap holding every
    current key and possibly outdated ones (a key is current while ``keys`` maps its node to it),
    compacted when outdated keys outnumber current ones."""

    __slots__ = ("heap", "keys", "mark", "pool")

    def __init__(self, pool: str, mark: int) -> None:
        self.pool = pool
        self.mark = mark
        self.heap: list[Ranked] = []
        self.keys: dict[str, Ranked] = {}

    def put(self, name: str, key: Ranked | None) -> None:
        keys = self.keys
        if keys.get(name) == key:
            return
        if key is None:
            del keys[name]
            return
        keys[name] = key
        heapq.heappush(self.heap, key)
        if len(self.heap) > 2 * len(keys) + 64:
            self.heap = list(keys.values())
            heapq.heapify(self.heap)

    def ordered(self) -> Iterator[str]:
        """The ranked nodes, best first, each once."""
        heap, keys = self.heap, self.keys
        while heap and keys.get(heap[0][1]) != heap[0]:
            heapq.heappop(heap)
        if not heap:
            return
        first = heap[0][1]
        yield first  # nearly always the answer: no copy of the heap
        rest = list(heap)
        seen = {first}
        while rest:
            key = heapq.heappop(rest)
            name = key[1]
            if name not in seen and keys.get(name) == key:
                seen.add(name)
                yield name


def members_of(state: ClusterState, node: NodeState) -> Members:
    """``node``'s GPUs tagged with its version in ``state`` (strategies.Members): the change
    record itself (never equal to another state's), the node's name and the seq of its last touch."""
    changes = state.changes
    return Members([state.gpus[g] for g in node.gpus], (changes, node.name, changes.nodes.get(node.name, 0)))


class RankCache:
    """(pool, request shape) -> feasible nodes in rank order, with the nodes to re-rank."""

    __slots__ = ("_cands", "_entries", "_gids", "_members")

    def __init__(self) -> None:
        self._entries: OrderedDict[ShapeKey, _Entry] = OrderedDict()
        self._members: dict[str, tuple[Changes, int, Members]] = {}
        """Node name -> (state.changes, seq of the node's last touch, its Members)."""
        self._cands: dict[str, tuple[Members, dict[int, tuple[int, ...]]]] = {}
        """Node name -> (its Members, GPU shape id -> positions of its candidates)."""
        self._gids: dict[ShapeKey, int] = {}
        """GPU shape (need.gpu_shape_key) -> a small id (ints keep the memo off the GC's walk)."""

    def clear(self) -> None:
        """Forget every ranking (a new state)."""
        self._entries.clear()
        self._members.clear()
        self._cands.clear()
        self._gids.clear()

    def members(self, state: ClusterState, node: NodeState) -> Members:
        """:func:`members_of` ``node``, the same list object while the node is unchanged (so a
        strategy's memo keyed by its version hits across request shapes)."""
        changes = state.changes
        seq = changes.nodes.get(node.name, 0)
        found = self._members.get(node.name)
        if found is None or found[0] is not changes or found[1] != seq:
            found = self._members[node.name] = (changes, seq, members_of(state, node))
        return found[2]

    def drop_pool(self, pool: str) -> None:
        """Forget the rankings of ``pool`` (its strategy or target workload changed)."""
        for key in [k for k, e in self._entries.items() if e.pool == pool]:
            del self._entries[key]

    def best(self, state: ClusterState, strategy: ScanStrategy, spec: AllocationSpec, need: Need, chain: Chain,
             ctx: Context, *, may_hold: Callable[[], Iterable[str]], admits: Callable[[NodeState], bool],
             free: dict[str, NodeFree]) -> tuple[NodeState, list[GpuState]] | None:
        """The node ``strategy`` ranks first among the feasible ones, and the GPUs it picks there.

        ``spec``/``need``/``chain`` are the request without its node-only fields (need.py), so
        requests differing only in those share a ranking; ``admits`` applies the request's own
        node-level filters to the ranked nodes, best first. ``may_hold`` lists the pool's nodes
        that may hold the request (a superset of the feasible ones: the node index's free
        classes), read when a ranking is built; ``free`` is the node index's summary per node, which
        rules out most touched nodes before their GPUs are looked at."""
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
        gkey = gpu_shape_key(spec)
        gid = self._gids.get(gkey)
        if gid is None:
            if len(self._gids) >= LIMIT:
                self._gids.clear()
                self._cands.clear()
            gid = self._gids[gkey] = len(self._gids)
        aid = spec.allocation_id
        keys = entry.keys
        for name in stale:
            summary = free.get(name)
            if summary is None or not summary.may_fit(need):
                if name in keys:
                    entry.put(name, None)
                continue
            entry.put(name, self._rank(state, strategy, name, gid, need, chain, ctx, aid))
        for name in entry.ordered():
            node = state.nodes[name]
            if admits(node):
                members = self.members(state, node)
                cands = self._candidates(members, node, gid, need, chain, ctx)
                return node, pick_scan(strategy, node, members, cands, need, ctx.config, aid)
        return None

    def _candidates(self, members: Members, node: NodeState, gid: int, need: Need, chain: Chain,
                    ctx: Context) -> list[GpuState]:
        """The node's GPUs that pass every GPU filter, shared by the request shapes with the same
        GPU shape (``gid``) while the node is unchanged (its ``members`` object is the same)."""
        slot = self._cands.get(node.name)
        if slot is None or slot[0] is not members:
            slot = self._cands[node.name] = (members, {})
        found = slot[1].get(gid)
        if found is None:
            found = slot[1][gid] = chain.passing(members, need, ctx)
        return [members[i] for i in found]

    def _rank(self, state: ClusterState, strategy: ScanStrategy, name: str, gid: int, need: Need,
              chain: Chain, ctx: Context, aid: str) -> Ranked | None:
        """The node's sort key, or None when it does not fit (Scheduler.node_fit's test)."""
        node = state.nodes.get(name)
        if node is None or node.pool != need.pool or not chain.node_admits(node, need, ctx):
            return None
        members = self.members(state, node)
        cands = self._candidates(members, node, gid, need, chain, ctx)
        if not chain.fits(node, cands, need, ctx):
            return None
        rank = strategy.rank(node, members, cands, need, ctx.config, aid)
        return tuple(map(neg, rank)), name
