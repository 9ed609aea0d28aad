"""NodeIndex: per pool, nodes ordered by their strategy score, bucketed by how much one GPU has free.

Owned by the Scheduler and refreshed for the nodes ``evolve`` reports as touched (any change to
a node's GPUs, liveness, or its pool's settings). A node's free class is ``floor(K × f)`` where
``f`` is the largest free share of TFLOPS of one of its GPUs; a request needing share ``r`` of a
GPU's TFLOPS only walks the classes that can hold it, merged back into score order, and skips a
node whose largest free amounts (TFLOPS and VRAM apart) cannot hold one share without looking at
its GPUs. (Classing by the smaller of the TFLOPS and VRAM shares would wrongly skip a GPU with
all its TFLOPS free and a little VRAM taken for a request of TFLOPS only.) Never serialised: rebuilt from the state.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping

from sortedcontainers import SortedList

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.summaries import PoolRoom
from services.allocator.domain.units import PERCENT_SCALE

ScoreFn = Callable[[GpuState, PoolConfig], int]
_NO_ROOM = PoolRoom()
CLASSES = 20
"""Free-share classes per pool (5 % of a GPU each), plus one for a whole free GPU."""


def _share(free: int, capacity: int) -> int:
    return free * PERCENT_SCALE // capacity if capacity > 0 else 0


class NodeFree:
    """Largest free amounts on one node's GPUs: milli-TFLOPS, bytes, milli-percent of TFLOPS, the
    idle GPU count, and the node's free CPU (millicores) and memory (bytes), None where the node
    reports no allocatable."""

    __slots__ = ("cpu", "idle", "memory", "pct", "tflops", "vram")

    def __init__(self, gpus: list[GpuState], node: NodeState | None = None) -> None:
        self.cpu = node.cpu_milli - node.used_cpu_milli if node is not None and node.cpu_milli else None
        self.memory = node.memory_bytes - node.used_memory_bytes if node is not None and node.memory_bytes else None
        self.tflops = max((g.available_milli_tflops for g in gpus), default=0)
        self.vram = max((g.available_vram_bytes for g in gpus), default=0)
        self.pct = max((_share(g.available_milli_tflops, g.spec.capacity.milli_tflops) for g in gpus), default=0)
        self.idle = sum(1 for g in gpus if not g.charges)

    def may_fit(self, need: Need) -> bool:
        """False only when no GPU of the node can hold one share of ``need`` (for ``shared``: no GPU
        is idle), or the node lacks the pod's CPU or memory (NodeResourcesFilter would remove it)."""
        if need.cpu_milli and self.cpu is not None and self.cpu < need.cpu_milli:
            return False
        if need.memory_bytes and self.memory is not None and self.memory < need.memory_bytes:
            return False
        if need.shared:
            return self.idle > 0
        if need.percent:
            if self.pct < need.percent:
                return False
        elif self.tflops < need.tflops:
            return False
        return self.vram >= need.vram


class _Pool:
    __slots__ = ("classes", "max_tflops", "nodes", "room")

    def __init__(self) -> None:
        self.classes = [SortedList() for _ in range(CLASSES + 1)]
        self.nodes = SortedList()
        """Every node's key, whatever its class: the pool's node order without merging the classes."""
        self.max_tflops = 0
        self.room = PoolRoom()


class NodeIndex:
    """Pool -> free classes -> SortedList of (−node score, node name), the same keys of every
    class in one SortedList (the pool's node order, walked whole by preemption), and the pool's largest free
    room (:class:`~services.allocator.domain.summaries.PoolRoom`); node -> (pool, key, class, GPU
    count) and its NodeFree. For a pool asked about a GPU model (:meth:`track_models`), also a
    room per GPU model of the pool (the nodes' GPUs of that model only), kept from then on."""

    __slots__ = ("_keys", "_model_parts", "_model_rooms", "_pools", "free")

    def __init__(self) -> None:
        self._pools: dict[str, _Pool] = {}
        self._keys: dict[str, tuple[str, tuple[int, str], int, int]] = {}
        self.free: dict[str, NodeFree] = {}
        self._model_rooms: dict[str, dict[str, PoolRoom]] = {}
        """Pool -> GPU model -> the room of the pool's GPUs of that model (tracked pools only)."""
        self._model_parts: dict[str, tuple[tuple[str, NodeFree, int], ...]] = {}
        """Node of a tracked pool -> (model, its free amounts on the node's GPUs of it, GPU count)."""

    def refresh(self, node: NodeState, gpus: dict[str, GpuState], score: ScoreFn, config: PoolConfig) -> None:
        """Recompute ``node``'s score and free amounts and re-place it in its pool's order."""
        self.drop(node.name)
        members = [gpus[name] for name in node.gpus if name in gpus]
        free = self.free[node.name] = NodeFree(members, node)
        total = sum(score(g, config) for g in members)
        key = (-(total // len(members)) if members else 0, node.name)
        cls = free.pct * CLASSES // PERCENT_SCALE
        pool = self._pools.get(node.pool) or self._pools.setdefault(node.pool, _Pool())
        pool.classes[cls].add(key)
        pool.nodes.add(key)
        pool.room.add(free, len(members))
        for g in members:
            pool.max_tflops = max(pool.max_tflops, g.spec.capacity.milli_tflops)
        self._keys[node.name] = (node.pool, key, cls, len(members))
        rooms = self._model_rooms.get(node.pool)
        if rooms is not None:
            self._add_models(node, members, free, rooms)

    def _add_models(self, node: NodeState, members: list[GpuState], free: NodeFree,
                    rooms: dict[str, PoolRoom]) -> None:
        by_model: dict[str, list[GpuState]] = {}
        for g in members:
            by_model.setdefault(g.spec.model, []).append(g)
        parts = []
        for model, group in by_model.items():
            part = free if len(by_model) == 1 else NodeFree(group, node)
            (rooms.get(model) or rooms.setdefault(model, PoolRoom())).add(part, len(group))
            parts.append((model, part, len(group)))
        self._model_parts[node.name] = tuple(parts)

    def track_models(self, pool: str, nodes: Mapping[str, NodeState], gpus: Mapping[str, GpuState]) -> None:
        """Keep a room per GPU model of ``pool`` from now on, built from its indexed nodes (``nodes``
        and ``gpus``: the state the index was refreshed from). O(the pool's GPUs) once."""
        if pool in self._model_rooms:
            return
        rooms = self._model_rooms[pool] = {}
        entry = self._pools.get(pool)
        for lst in entry.classes if entry is not None else ():
            for _, name in lst:
                node = nodes[name]
                self._add_models(node, [gpus[g] for g in node.gpus if g in gpus], self.free[name], rooms)

    def fits_no_model(self, pool: str, need: Need) -> bool:
        """True when no GPU of ``need``'s allowed models in ``pool`` can take it, by the rooms of
        those models (:meth:`PoolRoom.fits_nowhere` on each; a model the pool lacks has no room;
        with several models a node may give GPUs of more than one, so the GPU count is left to the
        pool's room). False for a request that allows any model. The pool must be tracked
        (:meth:`track_models`)."""
        if need.models is None:
            return False
        rooms, whole = self._model_rooms[pool], len(need.models) == 1
        return all(model not in rooms or rooms[model].fits_nowhere(need, whole=whole) for model in need.models)

    def tracks_models(self, pool: str) -> bool:
        """Whether :meth:`track_models` keeps rooms per GPU model for ``pool``."""
        return pool in self._model_rooms

    def copy(self) -> NodeIndex:
        """An independent copy (for a hypothetical state: a gang placed member by member)."""
        other = NodeIndex()
        for name, pool in self._pools.items():
            twin = other._pools[name] = _Pool()
            twin.classes = [lst.copy() for lst in pool.classes]
            twin.nodes = pool.nodes.copy()
            twin.max_tflops = pool.max_tflops
            twin.room = pool.room.copy()
        other._keys = dict(self._keys)
        other.free = dict(self.free)
        other._model_rooms = {pool: {m: room.copy() for m, room in rooms.items()}
                              for pool, rooms in self._model_rooms.items()}
        other._model_parts = dict(self._model_parts)
        return other

    def drop(self, node_name: str) -> None:
        """Forget a node (removed, or about to be re-placed)."""
        entry = self._keys.pop(node_name, None)
        free = self.free.pop(node_name, None)
        if entry is not None:
            pool = self._pools[entry[0]]
            pool.classes[entry[2]].remove(entry[1])
            pool.nodes.remove(entry[1])
            if free is not None:
                pool.room.remove(free, entry[3])
            parts = self._model_parts.pop(node_name, None)
            if parts is not None:
                rooms = self._model_rooms[entry[0]]
                for model, part, count in parts:
                    rooms[model].remove(part, count)

    def room(self, pool: str) -> PoolRoom:
        """``pool``'s largest free room (an empty one for a pool without indexed nodes)."""
        entry = self._pools.get(pool)
        return _NO_ROOM if entry is None else entry.room

    def min_class(self, pool: str, need: Need) -> int:
        """The lowest free class a node of ``pool`` must be in to hold one share of ``need``."""
        entry = self._pools.get(pool)
        if entry is None:
            return 0
        if need.shared:
            return CLASSES
        share = need.percent if need.percent else _share(need.tflops, entry.max_tflops)
        return min(CLASSES, share * CLASSES // PERCENT_SCALE)

    def ordered(self, pool: str, *, min_class: int = 0) -> Iterator[str]:
        """Node names of ``pool`` in free class ≥ ``min_class``, best score first, ties by name."""
        entry = self._pools.get(pool)
        if entry is None:
            return
        if min_class == 0:  # every class: the pool's own list, already in order
            for _, name in entry.nodes:
                yield name
            return
        lists = [lst for lst in entry.classes[min_class:] if lst]
        source = lists[0] if len(lists) == 1 else heapq.merge(*lists)
        for _, name in source:
            yield name

    def sort_keys(self, pool: str) -> list[tuple[int, str]]:
        """The sort keys of every node of ``pool``, in node order (:meth:`sort_key`, :meth:`ordered`)."""
        entry = self._pools.get(pool)
        return [] if entry is None else list(entry.nodes)

    def sort_key(self, node_name: str) -> tuple[int, str]:
        """The ordering key of a node (for ordering a subset the same way)."""
        return self._keys[node_name][1]
