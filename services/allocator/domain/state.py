"""ClusterState: the projection of the log (GPUs, nodes, allocations, quotas, pools, queue).

Records only: no scheduler index, memo or cache lives here (the Scheduler owns those). Besides
the records it keeps the two orderings the records imply (nodes by pool, the priority queue) and
``evolve``'s report of what it touched (:class:`Changes`), from which a Scheduler catches up.
Converts to and from :class:`StateSnapshot` for snapshots and the digest. Mutated only by
``evolve``; everything else reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime

import msgspec

from events.values import PoolConfig, QuotaSpec, Resources, ShareSpec
from services.allocator.domain.campaign_records import Campaign
from services.allocator.domain.deadlines import Deadlines
from services.allocator.domain.gang_index import GangIndex
from services.allocator.domain.model import (
    AllocationState,
    GpuState,
    NodeState,
    PoolDecay,
    QuotaUsage,
    RecentRequests,
    StateSnapshot,
)
from services.allocator.domain.queue import RequestQueue
from services.allocator.domain.shares import ShareIndex

_snapshot_encoder = msgspec.msgpack.Encoder()
_snapshot_decoder = msgspec.msgpack.Decoder(StateSnapshot)
_digest_encoder = msgspec.json.Encoder(order="sorted")

PROJECTION_VERSION = 6
"""The version of what a snapshot holds for a given log prefix. Bump it whenever ``evolve`` folds
the same events into a different state, or the snapshot gains a field whose value old snapshots
cannot supply (1: request shapes record VRAM and whole-GPU isolation; 2: nodes record
``idle_since``; 3: defrag campaigns and their reservations' holds; 4: shares, and allocations
record their share and whether they borrowed; 5: each pool's decayed share usage; 6: the time of the
last HeartbeatsChecked). A snapshot of another version is never resumed from: the state is rebuilt
from the log (:func:`resume_from`)."""


class StaleSnapshot(ValueError):
    """A snapshot written under another :data:`PROJECTION_VERSION` than this code's."""


LOG_LIMIT = 1 << 16
"""Recent touches :class:`Changes` keeps in order (older marks walk the per-node record instead)."""


ANY_PRIORITY = 2**63
"""A ``Changes.grown`` level above every priority: a touch that may have freed any room."""


class Changes:
    """What ``evolve`` touched, for whoever caches derived data (the Scheduler).

    ``seq`` counts touches; ``nodes`` maps a node name to the ``seq`` of its last touch, oldest
    first (a node touched again moves to the end), so :meth:`nodes_since` reads only what changed
    after a reader's mark; the recent touches are also kept in order (at most :data:`LOG_LIMIT`)
    so that read is a slice. ``inventory`` counts changes to what could ever fit (GPUs added,
    removed or resized, nodes removed). Not part of the snapshot or the digest.
    """

    __slots__ = ("_base", "_limit", "_log", "_origin", "grown", "inventory", "nodes", "protected", "seq")

    def __init__(self, *, log_limit: int = LOG_LIMIT) -> None:
        self.seq = 0
        self.inventory = 0
        self.nodes: dict[str, int] = {}
        self._log: list[str] = []
        self._base = 0
        """``_log[i]`` is the node of touch ``_base + i + 1``."""
        self._limit = log_limit
        self.grown: dict[str, dict[int, int]] = {}
        """Per node, per priority level, the ``seq`` of the last touch that may have given back room
        held by work of that priority or above (:data:`ANY_PRIORITY`: any touch but a grant or a
        release)."""
        self.protected: dict[str, int] = {}
        """Per node, the ``seq`` of the last grant of work carrying an eviction protection."""
        self._origin = 0
        """Marks before it predate this record (a continuing copy's): :meth:`grew_since` says yes."""

    def continuing(self, other: Changes) -> Changes:
        """A fresh record whose touches continue ``other``'s numbering (for a hypothetical copy of
        a state: its readers' marks taken on ``other`` stay valid); ``other`` is not changed."""
        self.seq = self._base = self._origin = other.seq
        self.inventory = other.inventory
        self.nodes, self._log = {}, []
        self.grown, self.protected = {}, {}
        return self

    def touch(self, node: str, *, grew: int | None = None, granted: bool = False, protected: bool = False) -> None:
        """Record that ``node``'s records (or its GPUs', or its pool's settings) changed. ``grew``:
        the priority of the work a release took off the node (room it held is free again);
        ``granted``: the change was a grant (it only takes room; ``protected`` when the grant
        carries an eviction protection); anything else may have changed any room there."""
        self.seq += 1
        level = ANY_PRIORITY if grew is None and not granted else grew
        if level is not None:
            self.grown.setdefault(node, {})[level] = self.seq
        if protected:
            self.protected[node] = self.seq
        self.nodes.pop(node, None)
        self.nodes[node] = self.seq
        log = self._log
        log.append(node)
        if len(log) > self._limit:
            drop = len(log) // 2
            del log[:drop]
            self._base += drop

    def grew_since(self, node: str, priority: int, mark: int) -> bool:
        """Whether a touch of ``node`` after ``mark`` may have given back room held by work of
        ``priority`` or above, or granted work with an eviction protection there: then a request of
        ``priority`` may find room with every lower-priority allocation gone that it did not find
        at ``mark`` (preemption.py ``_still_none``). True for a mark older than this record."""
        if self.protected_since(node, mark):
            return True
        return any(seq > mark and level >= priority for level, seq in self.grown.get(node, {}).items())

    def protected_since(self, node: str, mark: int) -> bool:
        """Whether work with an eviction protection was granted on ``node`` after ``mark`` (True
        for a mark older than this record)."""
        return mark < self._origin or self.protected.get(node, 0) > mark

    def nodes_since(self, mark: int) -> Iterator[str]:
        """Names of the nodes touched after ``mark`` (a past ``seq``), each once, most recent first."""
        if mark >= self._base:
            return iter(dict.fromkeys(reversed(self._log[mark - self._base:])))
        return self._walk_since(mark)

    def _walk_since(self, mark: int) -> Iterator[str]:
        for name, seq in reversed(self.nodes.items()):
            if seq <= mark:
                return
            yield name


class ClusterState:
    """The allocator's projection. Shapes: ``gpus`` name -> GpuState, ``nodes`` name -> NodeState,
    ``allocations`` allocation id -> AllocationState (granted and queued), ``quotas`` namespace ->
    QuotaSpec, ``usage`` namespace -> QuotaUsage (every namespace with a granted allocation),
    ``pools`` pool -> PoolConfig (configured pools only), ``position`` the last applied log position,
    ``recent`` pool -> its recent request shapes, ``pool_nodes`` pool -> node names, ``queue`` the
    queued allocations in grant order, ``changes`` what evolve touched, ``gangs`` the live members
    of each gang (derived like the queue; not in the snapshot), ``campaigns`` pool -> its running
    or last defrag campaign (domain/campaign_records.py).

    Shares (docs/allocation.md "Fair share"): ``shares`` name -> ShareSpec (in the snapshot), and
    ``share_index`` what is derived from it and the allocations (namespace -> leaf share, terms and
    usage per pool and share; domain/shares.py ShareIndex; not in the snapshot); ``reclaims`` pool
    -> the times of its reclaims in the last minute before the latest one (PoolConfig
    ``reclaim_max_per_minute``; in the snapshot); ``decayed`` pool -> its shares' decayed usage
    (PoolDecay, pools with a fair-share half-life; in the snapshot; domain/fairshare.py).

    ``checked_at``: the time of the last HeartbeatsChecked (None before the first; in the snapshot):
    the time-based blocks that ended after it are the ones the next CheckHeartbeats retries
    (domain/unblocked.py); ``deadlines`` orders the granted allocations' protection ends and borrowed
    grants per pool for that check (domain/deadlines.py; derived like the queue, not in the snapshot).
    """

    __slots__ = ("allocations", "campaigns", "changes", "checked_at", "common_capacity", "deadlines", "decayed",
                 "gangs", "gpus", "nodes", "pool_nodes", "pools", "position", "queue", "quotas", "recent", "reclaims",
                 "share_index", "shares", "usage")

    def __init__(self) -> None:
        self.position = 0
        self.gpus: dict[str, GpuState] = {}
        self.nodes: dict[str, NodeState] = {}
        self.allocations: dict[str, AllocationState] = {}
        self.quotas: dict[str, QuotaSpec] = {}
        self.usage: dict[str, QuotaUsage] = {}
        self.pools: dict[str, PoolConfig] = {}
        self.recent: dict[str, RecentRequests] = {}
        self.pool_nodes: dict[str, set[str]] = {}
        self.queue = RequestQueue()
        self.changes = Changes()
        self.gangs = GangIndex()
        self.campaigns: dict[str, Campaign] = {}
        self.shares: dict[str, ShareSpec] = {}
        self.share_index = ShareIndex()
        self.reclaims: dict[str, list[datetime]] = {}
        self.decayed: dict[str, PoolDecay] = {}
        self.checked_at: datetime | None = None
        self.deadlines = Deadlines()
        self.common_capacity: dict[str, tuple[int, Resources]] = {}
        """pool -> (``changes.inventory`` when computed, its GPUs' most common capacity): the
        learned target workload's unit (domain/target.py ``common_capacity``), recomputed only
        after the inventory changed. Derived; not in the snapshot or the digest."""

    @classmethod
    def empty(cls) -> ClusterState:
        """A state with nothing in it (position 0)."""
        return cls()

    def pool_config(self, pool: str) -> PoolConfig:
        """The pool's settings, or the defaults (NodeCompactGPULowLoad, 0.7/0.3) for an unconfigured pool."""
        return self.pools.get(pool) or _DEFAULT_POOL

    def to_snapshot(self) -> StateSnapshot:
        """The state as a serialisable value (shares records with the live state; encode it at once)."""
        return StateSnapshot(
            version=PROJECTION_VERSION,
            position=self.position,
            gpus=self.gpus,
            nodes=self.nodes,
            allocations=self.allocations,
            quotas=self.quotas,
            usage=self.usage,
            pools=self.pools,
            queue_seq=self.queue.next_seq,
            recent=self.recent,
            campaigns=self.campaigns,
            shares=self.shares,
            reclaims=self.reclaims,
            decayed=self.decayed,
            checked_at=self.checked_at,
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
        state.recent = dict(snapshot.recent)
        state.campaigns = dict(snapshot.campaigns)
        for node in state.nodes.values():
            state.pool_nodes.setdefault(node.pool, set()).add(node.name)
        state.queue.rebuild(state.allocations.values(), next_seq=snapshot.queue_seq)
        state.gangs.rebuild(state.allocations.values())
        state.deadlines.rebuild(state.allocations.values())
        state.shares = dict(snapshot.shares)
        state.reclaims = {pool: list(times) for pool, times in snapshot.reclaims.items()}
        state.share_index.rebuild(state.shares, state.allocations.values())
        state.decayed = dict(snapshot.decayed)
        state.checked_at = snapshot.checked_at
        return state


_DEFAULT_POOL = PoolConfig()


def encode_snapshot(state: ClusterState) -> bytes:
    """msgpack bytes of the whole state (the ``snapshots.state`` column)."""
    return _snapshot_encoder.encode(state.to_snapshot())


def decode_snapshot(data: bytes) -> ClusterState:
    """Inverse of :func:`encode_snapshot`; raises msgspec.DecodeError on corrupt bytes and
    :class:`StaleSnapshot` on one written under another :data:`PROJECTION_VERSION`."""
    snapshot = _snapshot_decoder.decode(data)
    if snapshot.version != PROJECTION_VERSION:
        raise StaleSnapshot(f"snapshot at {snapshot.position} has projection version {snapshot.version}, "
                            f"this code folds version {PROJECTION_VERSION}")
    return ClusterState.from_snapshot(snapshot)


def resume_from(data: bytes | None) -> ClusterState:
    """The state to fold the log's tail onto: the snapshot ``data`` decoded, or the empty state
    (a replay of the whole log) when there is none or it is stale."""
    if data is None:
        return ClusterState.empty()
    try:
        return decode_snapshot(data)
    except StaleSnapshot:
        return ClusterState.empty()


def digest(state: ClusterState) -> str:
    """Stable sha256 hex of the projected state (position excluded), equal for equal states."""
    snap = state.to_snapshot()
    snap = msgspec.structs.replace(snap, position=0)
    return hashlib.sha256(_digest_encoder.encode(snap)).hexdigest()
