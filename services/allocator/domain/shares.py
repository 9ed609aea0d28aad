"""Shares in the projection: the lookups derived from ``ClusterState.shares`` and each share's usage per pool.

A share (GPUShare; KAI Queue, Kueue ClusterQueue in a cohort, Volcano Queue) groups namespaces and
holds, per pool, a guarantee, a borrowing limit and a lending limit (events.values.ShareSpec).
A pool "has shares" when some share names it; only such pools keep usage per share, so a pool
without shares costs nothing here. Usage is kept exactly: ``evolve`` adds an allocation's amount
on grant and takes the very same amount back on release, preemption and resize (O(1) each: the
leaf share and its parent), and :meth:`ShareIndex.rebuild` recomputes it from the live
allocations only when the shares themselves change (ShareSet, ShareRemoved) or a snapshot is
loaded. Rules: docs/allocation.md "Fair share".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from events.values import ShareAmount, SharePool, ShareSpec
from services.allocator.domain.model import GRANTED, AllocationState, ShareUsage

UNSHARED = ""
"""The usage key of the namespaces in no share, in a pool with shares (their guarantee is 0)."""

NO_TERMS = SharePool(pool="")
"""The terms of a share in a pool it does not name: no guarantee, no limits."""

_ZERO = ShareUsage()


def amount(value: ShareAmount, resource: str) -> int | None:
    """One resource of an amount (``milli_tflops``, ``vram_bytes`` or ``gpus``); None when unset."""
    got: int | None = getattr(value, resource)
    return got


def used(value: ShareUsage, resource: str) -> int:
    """One resource of a usage, named as :func:`amount` names them."""
    got: int = getattr(value, resource)
    return got


def allocation_amount(allocation: AllocationState) -> tuple[int, int, int]:
    """What a granted allocation adds to its share's usage: (milli-TFLOPS, VRAM bytes, GPUs) — its
    quota usage's requests (percent converted on its GPUs, as quota does) and the GPUs it holds."""
    held = allocation.usage
    if held is None:
        return 0, 0, len(allocation.gpus)
    return held.requests_milli_tflops, held.requests_vram_bytes, len(allocation.gpus)


def children(shares: Mapping[str, ShareSpec], parent: str) -> list[str]:
    """The shares whose parent is ``parent``, sorted."""
    return sorted(name for name, spec in shares.items() if spec.parent == parent)


class ShareIndex:
    """What ClusterState derives from its shares and allocations (not in the snapshot).

    ``of``: namespace -> its leaf share; ``parent``: share -> its parent ("" for none); ``terms``:
    pool -> share -> its SharePool there (only pools some share names); ``usage``: pool -> share
    -> ShareUsage (a parent's is its children's sum; namespaces in no share under
    :data:`UNSHARED`; a zero usage is absent, so equal states have equal indexes).
    """

    __slots__ = ("family", "lenders", "of", "parent", "terms", "total", "usage")

    def __init__(self) -> None:
        self.of: dict[str, str] = {}
        self.parent: dict[str, str] = {}
        self.terms: dict[str, dict[str, SharePool]] = {}
        self.usage: dict[str, dict[str, ShareUsage]] = {}
        self.total: dict[str, ShareUsage] = {}
        """pool -> the usage of every namespace there (leaf shares and :data:`UNSHARED` summed)."""
        self.family: dict[str, frozenset[str]] = {}
        """share -> the namespaces whose requests its usage bounds: its own, and with a parent every
        namespace under that parent."""
        self.lenders: frozenset[str] = frozenset()
        """The pools where some share sets a lending limit (only there may shares keep capacity)."""

    def __bool__(self) -> bool:
        """True when some pool has shares."""
        return bool(self.terms)

    def has_shares(self, pool: str) -> bool:
        """True when some share names ``pool`` (only then do shares change decisions there)."""
        return pool in self.terms

    def leaf_of(self, namespace: str) -> str:
        """The share ``namespace`` belongs to, or :data:`UNSHARED`."""
        return self.of.get(namespace, UNSHARED)

    def terms_of(self, share: str, pool: str) -> SharePool:
        """``share``'s terms in ``pool`` (:data:`NO_TERMS` when it names none there, or is :data:`UNSHARED`)."""
        return self.terms.get(pool, {}).get(share, NO_TERMS)

    def keeps(self, share: str, pool: str) -> bool:
        """Whether ``share`` or its parent sets a lending limit in ``pool`` (keeps part of its
        unused guarantee for itself, so its own grants change what others may borrow)."""
        if not share or pool not in self.lenders:
            return False
        per_pool = self.terms.get(pool, {})
        for name in (share, self.parent.get(share, "")):
            held = per_pool.get(name)
            if held is not None and held.lending_limit is not None:
                return True
        return False

    def usage_of(self, share: str, pool: str) -> ShareUsage:
        """``share``'s usage in ``pool`` now (a zero ShareUsage when none; never mutate the result)."""
        return self.usage.get(pool, {}).get(share, _ZERO)

    def charge(self, allocation: AllocationState, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) a granted allocation's amount in its pool's share usage:
        its namespace's leaf share (or :data:`UNSHARED`) and that share's parent. Nothing in a pool
        without shares. O(1)."""
        pool = allocation.spec.pool
        if pool not in self.terms:
            return
        leaf = self.of.get(allocation.spec.namespace, UNSHARED)
        tflops, vram, gpus = allocation_amount(allocation)
        per_pool = self.usage.get(pool)
        if per_pool is None:
            per_pool = self.usage[pool] = {}
        _add(per_pool, leaf, sign * tflops, sign * vram, sign * gpus)
        parent = self.parent.get(leaf, "")
        if parent:
            _add(per_pool, parent, sign * tflops, sign * vram, sign * gpus)
        if not per_pool:
            del self.usage[pool]
        _add(self.total, pool, sign * tflops, sign * vram, sign * gpus)

    def copy(self) -> ShareIndex:
        """An index a hypothetical state may change (the usage copied, the lookups shared: only
        :meth:`rebuild` replaces them). O(share usages); nothing when no pool has shares."""
        other = ShareIndex()
        other.of, other.parent, other.terms, other.lenders = self.of, self.parent, self.terms, self.lenders
        other.family = self.family
        other.usage = {pool: {share: _copy(u) for share, u in per_pool.items()}
                       for pool, per_pool in self.usage.items()}
        other.total = {pool: _copy(u) for pool, u in self.total.items()}
        return other

    def rebuild(self, shares: Mapping[str, ShareSpec], allocations: Iterable[AllocationState]) -> None:
        """Recompute every lookup and usage from ``shares`` and the live ``allocations`` (a walk:
        only when the shares change or a snapshot is loaded)."""
        self.of = {ns: name for name, spec in shares.items() for ns in spec.namespaces}
        self.parent = {name: spec.parent for name, spec in shares.items() if spec.parent}
        under: dict[str, set[str]] = {}
        for name, spec in shares.items():
            under.setdefault(spec.parent or name, set()).update(spec.namespaces)
        self.family = {name: frozenset(under.get(spec.parent or name, ())) for name, spec in shares.items()}
        by_pool: dict[str, dict[str, SharePool]] = {}
        for name, spec in shares.items():
            for held in spec.pools:
                by_pool.setdefault(held.pool, {})[name] = held
        self.terms = by_pool
        self.lenders = frozenset(pool for pool, held in by_pool.items()
                                 if any(terms.lending_limit is not None for terms in held.values()))
        self.usage = {}
        self.total = {}
        if by_pool:
            for allocation in allocations:
                if allocation.status == GRANTED:
                    self.charge(allocation, 1)


def _copy(value: ShareUsage) -> ShareUsage:
    return ShareUsage(milli_tflops=value.milli_tflops, vram_bytes=value.vram_bytes, gpus=value.gpus)


def _add(per_pool: dict[str, ShareUsage], share: str, tflops: int, vram: int, gpus: int) -> None:
    entry = per_pool.get(share)
    if entry is None:
        entry = per_pool[share] = ShareUsage()
    entry.milli_tflops += tflops
    entry.vram_bytes += vram
    entry.gpus += gpus
    if entry.is_zero():
        del per_pool[share]
