"""ClusterState: the projection of the log (GPUs, nodes, allocations, quotas, pools, queue).

Owns the in-memory indexes that keep decisions cheap (nodes by pool, the priority queue) and
the conversion to and from :class:`StateSnapshot` for snapshots and the digest. Mutated only by
``evolve``; everything else reads it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import msgspec

from events.values import FilterCount, PoolConfig, QuotaSpec
from services.allocator.domain import profile
from services.allocator.domain.index import NodeIndex
from services.allocator.domain.model import (
    AllocationState,
    GpuState,
    NodeState,
    QuotaUsage,
    StateSnapshot,
)
from services.allocator.domain.need import ShapeKey
from services.allocator.domain.queue import RequestQueue

_snapshot_encoder = msgspec.msgpack.Encoder()
_snapshot_decoder = msgspec.msgpack.Decoder(StateSnapshot)
_digest_encoder = msgspec.json.Encoder(order="sorted")


class ClusterState:
    """The allocator's projection. Shapes: ``gpus`` name -> GpuState, ``nodes`` name -> NodeState,
    ``allocations`` allocation id -> AllocationState (granted and queued), ``quotas`` namespace ->
    QuotaSpec, ``usage`` namespace -> QuotaUsage (every namespace with a granted allocation),
    ``pools`` pool -> PoolConfig (configured pools only), ``position`` the last applied log position.
    """

    __slots__ = (
        "_deferred", "allocations", "gpus", "index", "nodes", "pool_nodes", "pools", "position", "queue", "quotas",
        "static_fit", "usage",
    )

    def __init__(self) -> None:
        self.position = 0
        self.gpus: dict[str, GpuState] = {}
        self.nodes: dict[str, NodeState] = {}
        self.allocations: dict[str, AllocationState] = {}
        self.quotas: dict[str, QuotaSpec] = {}
        self.usage: dict[str, QuotaUsage] = {}
        self.pools: dict[str, PoolConfig] = {}
        self.pool_nodes: dict[str, set[str]] = {}
        self.queue = RequestQueue()
        self.index = NodeIndex()
        self.static_fit: dict[ShapeKey, tuple[list[FilterCount], int]] = {}
        """Cache of static filter passes by request shape; cleared whenever the inventory changes."""
        self._deferred: set[str] | None = None

    @classmethod
    def empty(cls) -> ClusterState:
        """A state with nothing in it (position 0)."""
        return cls()

    def pool_config(self, pool: str) -> PoolConfig:
        """The pool's settings, or the defaults (NodeCompactGPULowLoad, 0.7/0.3) for an unconfigured pool."""
        return self.pools.get(pool) or _DEFAULT_POOL

    def refresh_node(self, name: str) -> None:
        """Re-rank node ``name`` in the index after its GPUs, pool or pool settings changed."""
        if self._deferred is not None:
            self._deferred.add(name)
            return
        node = self.nodes[name]
        config = self.pool_config(node.pool)
        score = profile.strategy_for(config.placement).node_gpu_score
        self.index.refresh(node, self.gpus, score, config)

    def drop_node(self, name: str) -> None:
        """Take a removed node out of the index."""
        if self._deferred is not None:
            self._deferred.add(name)
            return
        self.index.drop(name)

    @contextlib.contextmanager
    def bulk(self) -> Iterator[ClusterState]:
        """Fold many events at once: node re-ranking is deferred to the end, once per changed node.

        For replays only: nothing may ``decide`` on the state inside the block (its index is stale).
        The index is brought up to date on exit, also when the block raises.
        """
        self._deferred = set()
        try:
            yield self
        finally:
            changed, self._deferred = self._deferred, None
            for name in sorted(changed):
                if name in self.nodes:
                    self.refresh_node(name)
                else:
                    self.index.drop(name)

    def to_snapshot(self) -> StateSnapshot:
        """The state as a serialisable value (shares records with the live state; encode it at once)."""
        return StateSnapshot(
            position=self.position,
            gpus=self.gpus,
            nodes=self.nodes,
            allocations=self.allocations,
            quotas=self.quotas,
            usage=self.usage,
            pools=self.pools,
            queue_seq=self.queue.next_seq,
        )

    @classmethod
    def from_snapshot(cls, snapshot: StateSnapshot) -> ClusterState:
        """Rebuild a state (and its indexes) from a snapshot value."""
        state = cls()
        state.position = snapshot.position
        state.gpus = dict(snapshot.gpus)
        state.nodes = dict(snapshot.nodes)
        state.allocations = dict(snapshot.allocations)
        state.quotas = dict(snapshot.quotas)
        state.usage = dict(snapshot.usage)
        state.pools = dict(snapshot.pools)
        for node in state.nodes.values():
            state.pool_nodes.setdefault(node.pool, set()).add(node.name)
            state.refresh_node(node.name)
        state.queue.rebuild(state.allocations.values(), next_seq=snapshot.queue_seq)
        return state


_DEFAULT_POOL = PoolConfig()


def encode_snapshot(state: ClusterState) -> bytes:
    """msgpack bytes of the whole state (the ``snapshots.state`` column)."""
    return _snapshot_encoder.encode(state.to_snapshot())


def decode_snapshot(data: bytes) -> ClusterState:
    """Inverse of :func:`encode_snapshot`; raises msgspec.DecodeError on corrupt bytes."""
    return ClusterState.from_snapshot(_snapshot_decoder.decode(data))


def digest(state: ClusterState) -> str:
    """Stable sha256 hex of the projected state (position excluded), equal for equal states."""
    snap = state.to_snapshot()
    snap = msgspec.structs.replace(snap, position=0)
    return hashlib.sha256(_digest_encoder.encode(snap)).hexdigest()
