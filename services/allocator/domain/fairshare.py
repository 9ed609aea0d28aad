"""Fair-share order of waiting requests: each share's weighted dominant share in a pool.

Among waiting requests of the same priority (and QoS) in a pool with shares, the request whose
share has the lowest weighted dominant share goes first, then FIFO (docs/allocation.md "Fair-share
ordering"). A share's dominant share in a pool is the largest, over TFLOPS, VRAM and GPUs, of its
usage there divided by the pool's capacity (dominant resource fairness: Ghodsi et al., "Dominant
Resource Fairness", NSDI 2011; Kueue fair sharing's DominantResourceShare), divided by the share's
weight (Kueue ``fairSharing.weight``, KAI ``overQuotaWeight``). Capacity is the sum over the
pool's Ready nodes of their reported GPUs: milli-TFLOPS, VRAM bytes and the GPU count.

Usage is the share's current usage (domain/shares.py ShareIndex: Σ request milli-TFLOPS × GPUs,
Σ request VRAM × GPUs, GPUs held). With the pool's ``fair_share_half_life_s`` h > 0 it is, per
resource, the larger of the current usage c and its exponentially decayed average u (KAI
time-aware fairness, ``halfLifePeriod``; Kueue admission fair sharing ``usageHalfLifeTime``):

    u(t) = ∫ c(s) · (ln 2 / h) · 2^(-(t-s)/h) ds over s <= t   (c = 0 before the pool's first event)

kept exactly for a step function c by :func:`advance` at each event that changes usage in the
pool, from the event's time t and the previous one t0: ``u ← u·f + (1 − f)·c_before`` with
``f = 2^(-(t − t0)/h)``. So a share that held the pool yesterday yields to one that did not, a
grant counts at once (the current usage), and replay folds the same floats as the live state did.

Pure: ranks are functions of the state (the Scheduler keeps the pools' capacities; the reference
scheduler recomputes everything from the records). Ranks compare as ``(top, leaf)``: ``top`` the
weighted dominant share of the share's parent (department) or of the share itself at the top level,
``leaf`` its own, so departments compete first and teams within them (Kueue hierarchical cohorts).
Namespaces in no share rank after every share (:data:`UNSHARED_RANK`); in a pool without shares
every request ranks :data:`NO_RANK`, which leaves today's order exactly as it was.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Literal, NamedTuple

import msgspec

from services.allocator.domain.filters.liveness import READY
from services.allocator.domain.model import GRANTED, MISSING, DecayedUsage, NodeState, PoolDecay, ShareUsage
from services.allocator.domain.queue import GroupKey, OrderKey
from services.allocator.domain.shares import UNSHARED, allocation_amount
from services.allocator.domain.state import ClusterState

Rank = tuple[float, float]
"""(top-level weighted dominant share, the share's own): ascending goes first."""

NO_RANK: Rank = (0.0, 0.0)
"""The rank of every request in a pool without shares."""

UNSHARED_RANK: Rank = (math.inf, math.inf)
"""The rank of a namespace in no share, in a pool with shares: after every share."""

UsageOf = Callable[[str, str], ShareUsage]
"""``(share, pool) -> ShareUsage``: ShareIndex.usage_of, or a recount's lookup."""

RankOf = Callable[[str, "str | None"], Rank]
"""``(pool, share) -> Rank``: a Scheduler's ``rank`` bound to a state."""

Resource = Literal["TFLOPS", "VRAM", "GPUs"]
RESOURCES: tuple[Resource, ...] = ("TFLOPS", "VRAM", "GPUs")

_TINY = 1e-9
"""A decayed usage below this (milli-TFLOPS, bytes, GPUs) of a share holding nothing is dropped."""


class Capacity(NamedTuple):
    """A pool's capacity for dominant shares: milli-TFLOPS, VRAM bytes, GPUs (Ready nodes only)."""

    milli_tflops: int = 0
    vram_bytes: int = 0
    gpus: int = 0

    def plus(self, other: Capacity, sign: int = 1) -> Capacity:
        """This capacity with ``other`` added (``sign`` 1) or taken away (-1)."""
        return Capacity(self.milli_tflops + sign * other.milli_tflops, self.vram_bytes + sign * other.vram_bytes,
                        self.gpus + sign * other.gpus)


class Dominant(NamedTuple):
    """A share's dominant share in a pool: ``value`` (usage / capacity of ``resource``, 0..1 and
    more when capacity shrank), ``weight`` and ``weighted`` = value / weight."""

    share: str
    value: float
    resource: Resource
    weight: int

    @property
    def weighted(self) -> float:
        """The dominant share divided by the weight (what orders)."""
        return self.value / self.weight


def node_capacity(state: ClusterState, node: NodeState) -> Capacity:
    """What ``node`` adds to its pool's capacity: its reported GPUs when it is Ready, else nothing."""
    if node.phase != READY:
        return Capacity()
    tflops = vram = count = 0
    for name in node.gpus:
        gpu = state.gpus.get(name)
        if gpu is None or gpu.phase == MISSING:
            continue
        tflops += gpu.spec.capacity.milli_tflops
        vram += gpu.spec.capacity.vram_bytes
        count += 1
    return Capacity(tflops, vram, count)


def pool_capacity(state: ClusterState, pool: str) -> Capacity:
    """The pool's capacity computed from its nodes (O(GPUs in the pool))."""
    total = Capacity()
    for name in state.pool_nodes.get(pool, ()):
        node = state.nodes.get(name)
        if node is not None:
            total = total.plus(node_capacity(state, node))
    return total


class Capacities:
    """Each pool's capacity kept from its nodes' parts (a Scheduler's; not in the state): ``refresh``
    for each node evolve touched, so a pool's capacity costs O(1) to read. Only nodes of pools
    with shares are counted (a pool gaining shares has every node touched: ShareSet)."""

    __slots__ = ("_nodes", "_pools")

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[str, Capacity]] = {}
        self._pools: dict[str, Capacity] = {}

    def refresh(self, state: ClusterState, name: str) -> None:
        """Take node ``name``'s part afresh (gone, moved pool, phase or GPUs changed)."""
        node = state.nodes.get(name)
        counted = node is not None and state.share_index.has_shares(node.pool)
        old = self._nodes.get(name)
        if old is None and not counted:
            return
        if old is not None:
            self._pools[old[0]] = self._pools[old[0]].plus(old[1], -1)
            del self._nodes[name]
        if counted and node is not None:
            part = node_capacity(state, node)
            self._nodes[name] = (node.pool, part)
            self._pools[node.pool] = self._pools.get(node.pool, Capacity()).plus(part)

    def of(self, pool: str) -> Capacity:
        """The pool's capacity (of its counted nodes)."""
        return self._pools.get(pool) or Capacity()

    def copy(self) -> Capacities:
        """An independent copy (parts are immutable)."""
        other = Capacities()
        other._nodes, other._pools = dict(self._nodes), dict(self._pools)
        return other


def share_of(state: ClusterState, pool: str, namespace: str) -> str | None:
    """The share whose rank orders ``namespace``'s requests in ``pool``: its leaf share, UNSHARED
    ("") for a namespace in none, None in a pool without shares."""
    index = state.share_index
    if not index.has_shares(pool):
        return None
    return index.leaf_of(namespace)


def half_life_s(state: ClusterState, pool: str) -> int:
    """The pool's ``fair_share_half_life_s`` (0: no decay)."""
    return state.pool_config(pool).fair_share_half_life_s


def ordered_usage(state: ClusterState, pool: str, share: str, current: ShareUsage) -> tuple[float, float, float]:
    """The usage that orders ``share`` in ``pool``: ``current`` (milli-TFLOPS, VRAM bytes, GPUs), or
    per resource the larger of it and the decayed average when the pool has a half-life."""
    decay = state.decayed.get(pool)
    kept = decay.shares.get(share) if decay is not None else None
    if kept is None:
        return float(current.milli_tflops), float(current.vram_bytes), float(current.gpus)
    return (max(float(current.milli_tflops), kept.milli_tflops), max(float(current.vram_bytes), kept.vram_bytes),
            max(float(current.gpus), kept.gpus))


def dominant(state: ClusterState, pool: str, share: str, capacity: Capacity, current: ShareUsage) -> Dominant:
    """``share``'s dominant share in ``pool`` given the pool's ``capacity`` and its ``current`` usage:
    the largest usage / capacity over the resources the pool has (ties: TFLOPS, VRAM, GPUs)."""
    spec = state.shares.get(share)
    weight = spec.weight if spec is not None else 1
    best, which = 0.0, RESOURCES[0]
    for resource, used, total in zip(RESOURCES, ordered_usage(state, pool, share, current), capacity, strict=True):
        if total > 0 and used / total > best:
            best, which = used / total, resource
        elif total <= 0 and used > 0 and best < math.inf:  # capacity gone under a holder: it ranks last
            best, which = math.inf, resource
    return Dominant(share, best, which, weight)


def rank_from(state: ClusterState, pool: str, share: str | None, capacity: Capacity, usage_of: UsageOf) -> Rank:
    """The rank of ``share`` (:func:`share_of`) in ``pool``; ``usage_of(share, pool)`` its current usage."""
    if share is None:
        return NO_RANK
    spec = state.shares.get(share)
    if share == UNSHARED or spec is None:
        return UNSHARED_RANK
    own = dominant(state, pool, share, capacity, usage_of(share, pool)).weighted
    if spec.parent and spec.parent in state.shares:
        return dominant(state, pool, spec.parent, capacity, usage_of(spec.parent, pool)).weighted, own
    return own, own


def recount(state: ClusterState, pool: str) -> dict[str, ShareUsage]:
    """Every share's current usage in ``pool`` recomputed from the granted allocations (a parent's
    is its children's sum; namespaces in no share under UNSHARED): what the ShareIndex keeps
    incrementally, for the reference scheduler."""
    out: dict[str, ShareUsage] = {}
    for allocation in state.allocations.values():
        if allocation.status != GRANTED or allocation.spec.pool != pool:
            continue
        leaf = state.share_index.leaf_of(allocation.spec.namespace)
        spec = state.shares.get(leaf)
        tflops, vram, gpus = allocation_amount(allocation)
        for name in (leaf, spec.parent) if spec is not None and spec.parent else (leaf,):
            held = out.setdefault(name, ShareUsage())
            held.milli_tflops += tflops
            held.vram_bytes += vram
            held.gpus += gpus
    return out


def advance(state: ClusterState, pool: str, at: datetime) -> None:
    """Bring the pool's decayed share usage up to ``at`` with the usage held since the last
    advance (call before an event changes usage in ``pool``); nothing where the pool has no shares
    or no half-life. Time never runs back: an earlier ``at`` decays nothing."""
    h = half_life_s(state, pool)
    index = state.share_index
    if h <= 0 or not index.has_shares(pool):
        state.decayed.pop(pool, None)
        return
    decay = state.decayed.get(pool)
    if decay is None:
        state.decayed[pool] = PoolDecay(at=at, shares={})
        return
    elapsed = (at - decay.at).total_seconds()
    if elapsed <= 0:
        return
    f = 2.0 ** (-elapsed / h)
    g = 1.0 - f
    current = index.usage.get(pool, {})
    shares = decay.shares
    for name in sorted(set(shares) | set(current)):
        held = current.get(name) or ShareUsage()
        kept = shares.get(name)
        if kept is None:
            kept = shares[name] = DecayedUsage()
        kept.milli_tflops = kept.milli_tflops * f + g * held.milli_tflops
        kept.vram_bytes = kept.vram_bytes * f + g * held.vram_bytes
        kept.gpus = kept.gpus * f + g * held.gpus
        if held.is_zero() and max(kept.milli_tflops, kept.vram_bytes, kept.gpus) < _TINY:
            del shares[name]
    decay.at = at


def advance_all(state: ClusterState, at: datetime) -> None:
    """:func:`advance` every pool that keeps decayed usage (before the shares themselves change)."""
    for pool in sorted(state.decayed):
        advance(state, pool, at)


def forget_unshared(state: ClusterState) -> None:
    """Drop the decayed usage of pools that no longer have shares (after the shares change)."""
    for pool in [p for p in state.decayed if not state.share_index.has_shares(p)]:
        del state.decayed[pool]


def waiting(state: ClusterState, rank_of: RankOf | None = None) -> list[str]:
    """The queued allocation ids in grant order: effective priority, QoS, then in a pool with
    shares the rank of the request's share (:func:`rank_from`), then FIFO. ``rank_of(pool, share)``
    defaults to ranks computed from the state. Without shares anywhere: ``list(state.queue)``.
    Cost: O(n log groups)."""
    queue = state.queue
    if not state.share_index:
        return list(queue)
    ranks: dict[tuple[str, str | None], Rank] = {}
    capacities: dict[str, Capacity] = {}

    def rank(pool: str, namespace: str) -> Rank:
        share = share_of(state, pool, namespace)
        found = ranks.get((pool, share))
        if found is None:
            if rank_of is not None:
                found = rank_of(pool, share)
            else:
                capacity = capacities.get(pool)
                if capacity is None:
                    capacity = capacities[pool] = pool_capacity(state, pool)
                found = rank_from(state, pool, share, capacity, state.share_index.usage_of)
            ranks[(pool, share)] = found
        return found

    def ranked(group: GroupKey, members: Iterable[OrderKey]) -> Iterator[RankedKey]:
        r = rank(str(group[0]), str(group[1]))
        return (ranked_key(k, r) for k in members)

    merged = heapq.merge(*(ranked(group, members) for group, members in queue.groups.items()))
    return [key[4] for key in merged]


RankedKey = tuple[int, int, Rank, int, str]
"""(−priority, QoS rank, share rank, queue_seq, allocation id): ascending is grant order."""


def ranked_key(key: OrderKey, rank: Rank) -> RankedKey:
    """A queue key with its share's rank between QoS and arrival."""
    return key[0], key[1], rank, key[2], key[3]


class Standing(msgspec.Struct, frozen=True, kw_only=True):
    """Where a waiting request's share stands in its pool's fair-share order (what the queue and
    ``why`` say). ``share``: its share ("" when its namespace is in none); ``mine``: that share's
    dominant share (None for no share); ``ahead``: the share ranked first among those ahead of it
    with requests waiting at the same priority and QoS in the pool (None: none is ahead);
    ``shares_ahead``: how many such shares; ``level``: "share", or "parent" when the shares' parents
    decided (then ``mine``/``ahead`` are the parents'); ``text``: one sentence."""

    share: str
    mine: Dominant | None
    ahead: Dominant | None
    shares_ahead: int
    level: Literal["share", "parent"]
    text: str


def standing(state: ClusterState, pool: str, namespace: str, key: OrderKey, capacity: Capacity,
             usage_of: UsageOf) -> Standing | None:
    """The fair-share standing of a waiting request of ``namespace`` with queue key ``key``
    (:func:`~services.allocator.domain.queue.grant_order`) in ``pool``; None in a pool without
    shares. Cost: O(queue groups)."""
    share = share_of(state, pool, namespace)
    if share is None:
        return None
    mine_rank = rank_from(state, pool, share, capacity, usage_of)
    rivals: dict[str, Rank] = {}
    for group, members in state.queue.groups.items():
        if group[0] != pool or group[1] == namespace:
            continue
        other = share_of(state, pool, str(group[1]))
        if other is None or other == share or other in rivals:
            continue
        at = members.bisect_left((key[0], key[1], -1, ""))
        if at < len(members) and members[at][:2] == key[:2]:
            rivals[other] = rank_from(state, pool, other, capacity, usage_of)
    ahead = sorted((r, name) for name, r in rivals.items() if r < mine_rank)
    mine = _described(state, pool, share, capacity, usage_of)
    if not ahead:
        if share == UNSHARED or share not in state.shares:
            text = f"namespace {namespace} is in no share: its requests wait after every share's of the same priority"
        elif shares := [name for name in rivals if name != UNSHARED]:
            text = f"share {share} is first among the {len(shares) + 1} shares waiting at this priority: {_fig(mine)}"
        else:
            text = f"share {share} is the only share waiting at this priority: {_fig(mine)}"
        return Standing(share=share, mine=mine, ahead=None, shares_ahead=0, level="share", text=text)
    front_rank, front = ahead[0]
    level: Literal["share", "parent"] = "share"
    theirs = _described(state, pool, front, capacity, usage_of)
    if front_rank[0] != mine_rank[0] and (_parent(state, share) or _parent(state, front)):
        level = "parent"
        mine = _described(state, pool, _parent(state, share) or share, capacity, usage_of)
        theirs = _described(state, pool, _parent(state, front) or front, capacity, usage_of)
    more = f" ({len(ahead)} shares ahead)" if len(ahead) > 1 else ""
    if mine is None or theirs is None:
        text = (f"share {front} is ahead{more}: namespace {namespace} is in no share, so it waits after every "
                f"share's requests of the same priority")
    elif level == "share":
        text = (f"share {front} is ahead{more}: dominant share {_fig_short(theirs)} vs yours {_fig_short(mine)}, "
                f"weight {theirs.weight} vs {mine.weight}")
    else:
        who = f"share {theirs.share}" + (f" (parent of {front})" if theirs.share != front else "")
        text = (f"{who} is ahead{more}: dominant share {_fig_short(theirs)} vs {mine.share}'s {_fig_short(mine)}, "
                f"weight {theirs.weight} vs {mine.weight}")
    return Standing(share=share, mine=mine, ahead=theirs, shares_ahead=len(ahead), level=level, text=text)


def _parent(state: ClusterState, share: str) -> str:
    spec = state.shares.get(share)
    return spec.parent if spec is not None and spec.parent in state.shares else ""


def _described(state: ClusterState, pool: str, share: str, capacity: Capacity, usage_of: UsageOf) -> Dominant | None:
    """``share``'s dominant share (None for UNSHARED or an unknown share)."""
    if share == UNSHARED or share not in state.shares:
        return None
    return dominant(state, pool, share, capacity, usage_of(share, pool))


def _fig_short(found: Dominant | None) -> str:
    """``0.21 (VRAM)``."""
    if found is None:
        return "none"
    return f"{found.value:.2f} ({found.resource})"


def _fig(found: Dominant | None) -> str:
    """``dominant share 0.21 (VRAM), weight 2``."""
    if found is None:
        return "no share"
    return f"dominant share {_fig_short(found)}, weight {found.weight}"
