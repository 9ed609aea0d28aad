"""Per-pool (and per-GPU-model) summaries of the largest free room: "fits nowhere" without walking a node.

Kept by the node index (:class:`services.allocator.domain.index.NodeIndex`) from the nodes evolve
touched (``ClusterState.changes``): per pool, each node's largest free amounts
(:class:`~services.allocator.domain.index.NodeFree`: free milli-TFLOPS, VRAM bytes and milli-percent
of TFLOPS on one GPU, idle GPUs, free CPU millicores and memory bytes) and its GPU count, each
dimension in a sorted multiset, so the pool's largest value of any dimension is read in O(1) and a
node re-placed in O(log n). A request is refused by :meth:`PoolRoom.fits_nowhere` when, in one
dimension, it asks more than every node of its pool has: every node's own summary
(``NodeFree.may_fit``) would rule it out, so the walk could not find a node (conservative: it never
says "fits nowhere" where the brute-force walk finds a fit; tests/unit/allocator/test_summaries.py).

The node index keeps the same rooms per pool and GPU model (``NodeIndex.track_models``, from the
first request restricted to a model on), each over the nodes' GPUs of that model only, so a
request allowed only some models is refused when none of their rooms can hold it.

The same maxima make the cheap part of a queued request's reason (:meth:`PoolRoom.room`): the
largest free TFLOPS and VRAM on one GPU and the most idle GPUs on one node of the pool. The
kube-scheduler analogue is PreFilter rejecting from pod-level facts before any node is filtered.
Never serialised: rebuilt from the state.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from sortedcontainers import SortedList

from services.allocator.domain.need import Need

UNBOUNDED = 1 << 62
"""Stands for the CPU or memory of a node that reports no allocatable (the filters do not bound it)."""


class Free(Protocol):
    """What a node's summary holds (NodeFree): largest free amounts of one GPU, idle GPUs, CPU, memory."""

    tflops: int
    vram: int
    pct: int
    idle: int
    cpu: int | None
    memory: int | None


class Room(NamedTuple):
    """A pool's largest free room: milli-TFLOPS and VRAM bytes free on one GPU (each the largest of
    any GPU, not necessarily the same GPU), idle GPUs on one node, and the pool's GPU count."""

    milli_tflops: int
    vram_bytes: int
    idle: int
    gpus: int


class PoolRoom:
    """One pool's sorted multisets of its nodes' largest free amounts; ``version`` counts changes."""

    __slots__ = ("count", "cpu", "gpus", "idle", "memory", "nodes", "pct", "tflops", "version", "vram")

    def __init__(self) -> None:
        self.tflops: SortedList = SortedList()
        self.vram: SortedList = SortedList()
        self.pct: SortedList = SortedList()
        self.idle: SortedList = SortedList()
        self.cpu: SortedList = SortedList()
        self.memory: SortedList = SortedList()
        self.count: SortedList = SortedList()
        self.gpus = 0
        self.nodes = 0
        self.version = 0

    def copy(self) -> PoolRoom:
        """An independent copy."""
        other = PoolRoom()
        for name in ("tflops", "vram", "pct", "idle", "cpu", "memory", "count"):
            setattr(other, name, getattr(self, name).copy())
        other.gpus, other.nodes, other.version = self.gpus, self.nodes, self.version
        return other

    def add(self, free: Free, gpus: int) -> None:
        """Count a node with summary ``free`` and ``gpus`` GPUs."""
        self._each(free, gpus, add=True)

    def remove(self, free: Free, gpus: int) -> None:
        """Forget a node counted by :meth:`add` with the same values."""
        self._each(free, gpus, add=False)

    def _each(self, free: Free, gpus: int, *, add: bool) -> None:
        sign = 1 if add else -1
        self.version += 1
        self.gpus += sign * gpus
        self.nodes += sign
        values = (free.tflops, free.vram, free.pct, free.idle, UNBOUNDED if free.cpu is None else free.cpu,
                  UNBOUNDED if free.memory is None else free.memory, gpus)
        for lst, value in zip((self.tflops, self.vram, self.pct, self.idle, self.cpu, self.memory, self.count),
                              values, strict=True):
            if add:
                lst.add(value)
            else:
                lst.remove(value)

    def fits_nowhere(self, need: Need, *, whole: bool = True) -> bool:
        """True when no node of the pool can hold ``need``: in one dimension it asks more than every
        node's summary has (the test of ``NodeFree.may_fit``, against the pool's largest values),
        or more GPUs than any node has. False says nothing (the nodes must be walked). ``whole``
        False: the room holds only some of the GPUs a node may give ``need`` (one of several
        allowed GPU models), so the GPU count is not judged here."""
        if not self.nodes or (whole and need.count > self.count[-1]):
            return True
        if need.cpu_milli and self.cpu[-1] < need.cpu_milli:
            return True
        if need.memory_bytes and self.memory[-1] < need.memory_bytes:
            return True
        if need.shared:
            return bool(self.idle[-1] <= 0)
        if need.percent:
            if self.pct[-1] < need.percent:
                return True
        elif self.tflops[-1] < need.tflops:
            return True
        return bool(self.vram[-1] < need.vram)

    def room(self) -> Room:
        """The pool's largest free room (zeros for a pool without nodes)."""
        if not self.nodes:
            return Room(0, 0, 0, self.gpus)
        return Room(self.tflops[-1], self.vram[-1], self.idle[-1], self.gpus)
