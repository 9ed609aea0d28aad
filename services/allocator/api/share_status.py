"""Each share's figures per pool: guaranteed, used, borrowed, lent and fair share (pure, read side).

Per pool that some share names and per resource (milli-TFLOPS, VRAM bytes, GPUs), exact fractions
(docs/shares.md, "What is shown for a share", defines each; docs/allocation.md "Fair share" the
rules the allocator applies):

- ``guaranteed``: the share's guarantee there (0 where not set);
- ``used``: the domain's usage of the share (``ClusterState.share_index``: its namespaces' granted
  allocations, percent requests converted as quota does; a parent's is its children's sum);
- ``borrowed``: the part of ``used`` held by allocations granted as borrowed (their ``borrowed``
  field); a parent's is its children's sum;
- ``lent``: the pool's borrowing beyond its unreserved surplus, ``D = max(0, Σ borrowed - surplus)``
  (Σ over every leaf share and the namespaces in none), attributed to the leaf shares in proportion
  to what each can lend, ``lendable = min(max(0, guaranteed - used), lending_limit)``:
  ``lent = lendable x min(1, D / Σ lendable)``; a parent's is its children's sum;
- ``fair``: ``guaranteed + surplus x weight / Σ weight`` over the pool's top-level shares, with
  ``surplus = max(0, capacity - Σ top-level guarantees)``; a child divides what its parent's fair
  share leaves beyond the children's guarantees, by the children's weights.

Capacity is the pool's GPUs that discovery reports (model.capacity_totals; their count for GPUs).
The share terms are Kueue's (nominalQuota, borrowingLimit, lendingLimit, fairSharing.weight) and
KAI's (deserved, limit, overQuotaWeight); the figures are gpuledger's own, computed from the
projection on each read (cost: one pass over the live allocations and GPUs, when some pool has shares).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import msgspec

from events.values import SHARE_RESOURCES, ShareAmount, SharePool
from services.allocator.domain import borrowing
from services.allocator.domain import shares as domain_shares
from services.allocator.domain.model import GRANTED, MISSING, QUEUED, AllocationState, GpuState
from services.allocator.domain.state import ClusterState

Vector = tuple[Fraction, Fraction, Fraction]
"""An amount per resource of :data:`events.values.SHARE_RESOURCES`: milli-TFLOPS, VRAM bytes, GPUs."""
ZERO: Vector = (Fraction(0), Fraction(0), Fraction(0))


class PoolFigures(msgspec.Struct, frozen=True, kw_only=True):
    """One share in one pool: its ``terms`` (``pool`` "" when it names none there but a child does)
    and the figures of the module docstring; ``below``: the resources whose used is under the
    guarantee; ``above``: those whose used exceeds it as borrowing judges a grant
    (domain/borrowing.py ``exceeded``: a guarantee that sets no resource guarantees 0 of each);
    ``waiting``: the share's queued requests in the pool."""

    share: str
    pool: str
    terms: SharePool
    guaranteed: Vector
    used: Vector
    borrowed: Vector
    lent: Vector
    fair: Vector
    below: tuple[str, ...]
    above: tuple[str, ...]
    waiting: int


class PoolTotals(msgspec.Struct, frozen=True, kw_only=True):
    """A pool with shares: ``capacity``, ``reserved`` (Σ top-level guarantees), ``surplus``,
    ``borrowed`` (Σ over every leaf and the namespaces in no share) and ``unshared`` (what the
    namespaces in no share hold)."""

    pool: str
    capacity: Vector
    reserved: Vector
    surplus: Vector
    borrowed: Vector
    unshared: Vector


def vector(amount: ShareAmount | None) -> Vector:
    """An amount as a vector (an unset resource is 0)."""
    if amount is None:
        return ZERO
    return (Fraction(amount.milli_tflops or 0), Fraction(amount.vram_bytes or 0), Fraction(amount.gpus or 0))


def _add(a: Vector, b: Vector) -> Vector:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _sum(vectors: list[Vector]) -> Vector:
    total = ZERO
    for one in vectors:
        total = _add(total, one)
    return total


def _floor0(a: Vector, b: Vector) -> Vector:
    """max(0, a - b) per resource."""
    return (max(Fraction(0), a[0] - b[0]), max(Fraction(0), a[1] - b[1]), max(Fraction(0), a[2] - b[2]))


def _scale(a: Vector, factor: Vector) -> Vector:
    return (a[0] * factor[0], a[1] * factor[1], a[2] * factor[2])


def _capped(value: Vector, limit: ShareAmount | None) -> Vector:
    """``value`` at most ``limit`` per resource where the limit sets it."""
    if limit is None:
        return value
    bounds = (limit.milli_tflops, limit.vram_bytes, limit.gpus)
    return (min(value[0], Fraction(bounds[0])) if bounds[0] is not None else value[0],
            min(value[1], Fraction(bounds[1])) if bounds[1] is not None else value[1],
            min(value[2], Fraction(bounds[2])) if bounds[2] is not None else value[2])


def _members(state: ClusterState, pool: str) -> tuple[list[str], dict[str, list[str]]]:
    """The pool's top-level shares (no parent; naming the pool themselves or through a child) and
    each one's children that take part (naming the pool, or whose parent does)."""
    named = set(state.share_index.terms.get(pool, {}))
    top: set[str] = set()
    kids: dict[str, list[str]] = {}
    for name, spec in state.shares.items():
        if spec.parent:
            if name in named or spec.parent in named:
                top.add(spec.parent)
                kids.setdefault(spec.parent, []).append(name)
        elif name in named:
            top.add(name)
    return sorted(n for n in top if n in state.shares), {p: sorted(c) for p, c in kids.items()}


def pool_figures(state: ClusterState, pool: str, *, lives: Iterable[AllocationState] | None = None,
                 gpus: Iterable[GpuState] | None = None) -> tuple[PoolTotals, list[PoolFigures]]:
    """The totals of ``pool`` and the figures of every share taking part there (parents before
    their children, by name); ``([], ...)`` figures for a pool without shares. ``lives``/``gpus``:
    the pool's live allocations and GPUs when the caller has them grouped (default: found by a walk)."""
    top, kids = _members(state, pool)
    index = state.share_index
    present = [g.spec.capacity for g in (gpus if gpus is not None else state.gpus.values())
               if g.pool == pool and g.phase != MISSING]  # as model.capacity_totals counts capacity
    capacity: Vector = (Fraction(sum(c.milli_tflops for c in present)), Fraction(sum(c.vram_bytes for c in present)),
                        Fraction(len(present)))
    leaves = [c for t in top for c in kids.get(t, [])] + [t for t in top if t not in kids]
    sums: dict[str, list[int]] = {}  # leaf -> borrowed [milli-TFLOPS, bytes, GPUs], in integers
    waiting: dict[str, int] = {}
    for allocation in (lives if lives is not None else state.allocations.values()):
        if allocation.spec.pool != pool:
            continue
        leaf = index.leaf_of(allocation.spec.namespace)
        if allocation.status == QUEUED:
            waiting[leaf] = waiting.get(leaf, 0) + 1
        elif allocation.status == GRANTED and allocation.borrowed:
            tflops, vram, held = domain_shares.allocation_amount(allocation)
            total = sums.setdefault(leaf, [0, 0, 0])
            total[0] += tflops
            total[1] += vram
            total[2] += held
    borrowed: dict[str, Vector] = {leaf: (Fraction(t[0]), Fraction(t[1]), Fraction(t[2])) for leaf, t in sums.items()}
    terms = {name: index.terms_of(name, pool) for name in [*top, *leaves]}
    guaranteed = {name: vector(terms[name].guaranteed) for name in terms}
    used = {name: vector_of_usage(state, name, pool) for name in terms}
    reserved = _sum([guaranteed[t] for t in top])
    surplus = _floor0(capacity, reserved)
    unshared = vector_of_usage(state, domain_shares.UNSHARED, pool)
    all_borrowed = _add(_sum([borrowed.get(leaf, ZERO) for leaf in leaves]), borrowed.get(domain_shares.UNSHARED, ZERO))
    beyond = _floor0(all_borrowed, surplus)
    lendable = {leaf: _capped(_floor0(guaranteed[leaf], used[leaf]), terms[leaf].lending_limit) for leaf in leaves}
    offered = _sum(list(lendable.values()))
    share_of = tuple(min(Fraction(1), beyond[i] / offered[i]) if offered[i] else Fraction(0) for i in range(3))
    lent = {leaf: _scale(lendable[leaf], (share_of[0], share_of[1], share_of[2])) for leaf in leaves}
    fair: dict[str, Vector] = {}
    top_weight = sum(state.shares[t].weight for t in top)
    for t in top:
        fair[t] = _add(guaranteed[t], _scale(surplus, (Fraction(state.shares[t].weight, top_weight),) * 3))
        children = kids.get(t, [])
        if children:
            left = _floor0(fair[t], _sum([guaranteed[c] for c in children]))
            weight = sum(state.shares[c].weight for c in children)
            for c in children:
                fair[c] = _add(guaranteed[c], _scale(left, (Fraction(state.shares[c].weight, weight),) * 3))
            borrowed[t] = _sum([borrowed.get(c, ZERO) for c in children])
            lent[t] = _sum([lent[c] for c in children])
            waiting[t] = sum(waiting.get(c, 0) for c in children)
    figures = []
    for t in top:
        for name in [t, *kids.get(t, [])]:
            below = tuple(r for i, r in enumerate(SHARE_RESOURCES) if used[name][i] < guaranteed[name][i])
            usage = index.usage_of(name, pool)
            above = tuple(borrowing.exceeded(terms[name].guaranteed, (usage.milli_tflops, usage.vram_bytes,
                                                                       usage.gpus)))
            figures.append(PoolFigures(share=name, pool=pool, terms=terms[name], guaranteed=guaranteed[name],
                                       used=used[name], borrowed=borrowed.get(name, ZERO), lent=lent.get(name, ZERO),
                                       fair=fair[name], below=below, above=above, waiting=waiting.get(name, 0)))
    return PoolTotals(pool=pool, capacity=capacity, reserved=reserved, surplus=surplus, borrowed=all_borrowed,
                      unshared=unshared), figures


def vector_of_usage(state: ClusterState, share: str, pool: str) -> Vector:
    """The domain's usage of ``share`` in ``pool`` (domain/shares.py ShareIndex) as a vector."""
    usage = state.share_index.usage_of(share, pool)
    return (Fraction(usage.milli_tflops), Fraction(usage.vram_bytes), Fraction(usage.gpus))


def share_pools(state: ClusterState) -> list[str]:
    """The pools some share takes part in, sorted."""
    pools = set(state.share_index.terms)
    return sorted(pools)


def all_figures(state: ClusterState) -> dict[str, list[PoolFigures]]:
    """Share name -> its figures in each pool it takes part in (by pool); every share of the
    projection is a key (one naming no pool has an empty list)."""
    found: dict[str, list[PoolFigures]] = {name: [] for name in sorted(state.shares)}
    pools = share_pools(state)
    lives: dict[str, list[AllocationState]] = {pool: [] for pool in pools}
    gpus: dict[str, list[GpuState]] = {pool: [] for pool in pools}
    if pools:  # one walk of the allocations and GPUs for every pool with shares
        for allocation in state.allocations.values():
            lives.get(allocation.spec.pool, []).append(allocation)
        for gpu in state.gpus.values():
            gpus.get(gpu.pool, []).append(gpu)
    for pool in pools:
        for one in pool_figures(state, pool, lives=lives[pool], gpus=gpus[pool])[1]:
            found.setdefault(one.share, []).append(one)
    return found
