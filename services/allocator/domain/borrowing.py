"""Borrowing: whether a grant in a pool with shares is borrowed, and whether it may borrow.

Rules (docs/allocation.md "Fair share"; Kueue ClusterQueue nominalQuota / borrowingLimit /
lendingLimit, KAI deserved quota and limit):

* A share's usage in a pool: Σ request milli-TFLOPS × GPUs (percent converted on the chosen GPUs),
  Σ request VRAM × GPUs and the GPUs held, over its namespaces' granted allocations there
  (domain/shares.py). A parent's usage is its children's sum.
* A grant is **borrowed** when, with it, its share's usage (or its parent's) exceeds the guarantee
  in some resource the guarantee sets. A share that sets no resource in the pool (or names no
  terms there), and a namespace in no share, have a guarantee of 0: every grant of theirs is
  borrowed.
* A borrowed grant is allowed only while the share's usage (and its parent's) stays within
  guarantee + borrowing limit in every resource the limit sets, and only into capacity no other
  share keeps for itself: a share with a lending limit keeps ``guarantee - lending limit - usage``
  (floored at 0) of each resource free for its own requests. Otherwise the request waits with
  code ``share`` and a reason naming the share, the resource and the figures.

Pure; reads the state, never mutates it. Costs nothing in a pool without shares (callers check
``ShareIndex.has_shares`` first).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from events.quantity import tflops_text, vram_text
from events.values import SHARE_RESOURCES, AllocationSpec, ShareAmount
from services.allocator.domain.model import MISSING, AllocationState, QuotaUsage
from services.allocator.domain.placement import Blocked, Grant
from services.allocator.domain.shares import UNSHARED, ShareIndex, allocation_amount
from services.allocator.domain.state import ClusterState

Amount = tuple[int, int, int]
"""(milli-TFLOPS, VRAM bytes, GPUs), in the order of :data:`events.values.SHARE_RESOURCES`."""

NAMES = {"milli_tflops": "TFLOPS", "vram_bytes": "VRAM", "gpus": "GPUs"}
"""Each share resource's word in a reason."""


class Judgement(NamedTuple):
    """What shares say about one grant: the leaf share charged ("" for none), whether it is
    borrowed, and why it may not be granted (None: it may)."""

    share: str
    borrowed: bool
    block: str | None = None


NOT_SHARED = Judgement("", False)
"""The judgement in a pool without shares."""


def text(resource: str, value: int) -> str:
    """An amount of one resource in words (``12.5 TFLOPS``, ``40 GiB``, ``2 GPUs``)."""
    if resource == "milli_tflops":
        return tflops_text(value)
    if resource == "vram_bytes":
        return vram_text(value)
    return f"{value} GPU{'s' if value != 1 else ''}"


def grant_amount(add: QuotaUsage, gpus: int) -> Amount:
    """What a grant adds to its share's usage: its quota usage's requests and its GPU count."""
    return add.requests_milli_tflops, add.requests_vram_bytes, gpus


def guarantee_of(index: ShareIndex, share: str, pool: str) -> ShareAmount:
    """``share``'s guarantee in ``pool`` (unset everywhere for :data:`UNSHARED` or a pool it does not name)."""
    return index.terms_of(share, pool).guaranteed if share else ShareAmount()


def exceeded(guarantee: ShareAmount, usage: Amount) -> Iterator[str]:
    """The resources (of :data:`events.values.SHARE_RESOURCES`, in order) in which ``usage``
    exceeds ``guarantee``: those the guarantee sets, or every one when it sets none (a guarantee
    of 0 of each). Lazy, so :func:`over` stops at the first."""
    values = (guarantee.milli_tflops, guarantee.vram_bytes, guarantee.gpus)
    if all(v is None for v in values):
        return (r for r, u in zip(SHARE_RESOURCES, usage, strict=True) if u > 0)
    return (r for r, g, u in zip(SHARE_RESOURCES, values, usage, strict=True) if g is not None and u > g)


def over(guarantee: ShareAmount, usage: Amount) -> str | None:
    """The first resource in which ``usage`` exceeds ``guarantee`` (:func:`exceeded`), or None
    when it is within."""
    return next(exceeded(guarantee, usage), None)


def usage_after(index: ShareIndex, share: str, pool: str, add: Amount, without: Sequence[AllocationState]) -> Amount:
    """``share``'s usage in ``pool`` with ``add`` and without the granted ``without`` of its own
    namespaces (a parent: of its children's)."""
    now = index.usage_of(share, pool)
    tflops, vram, gpus = now.milli_tflops + add[0], now.vram_bytes + add[1], now.gpus + add[2]
    for victim in without:
        leaf = index.leaf_of(victim.spec.namespace)
        if victim.spec.pool == pool and (leaf == share or (leaf and index.parent.get(leaf) == share)):
            t, v, g = allocation_amount(victim)
            tflops, vram, gpus = tflops - t, vram - v, gpus - g
    return tflops, vram, gpus


def pool_capacity(state: ClusterState, pool: str) -> Amount:
    """The pool's capacity: Σ milli-TFLOPS, Σ VRAM bytes and the number of its GPUs discovery
    still reports (a GPU left out of its node's last report, phase ``Unknown``, does not count)."""
    tflops = vram = count = 0
    gpus = state.gpus
    for name in state.pool_nodes.get(pool, ()):
        for gpu_name in state.nodes[name].gpus:
            gpu = gpus[gpu_name]
            if gpu.phase != MISSING:
                tflops += gpu.spec.capacity.milli_tflops
                vram += gpu.spec.capacity.vram_bytes
                count += 1
    return tflops, vram, count


def judge(state: ClusterState, spec: AllocationSpec, add: Amount, *,
          without: Sequence[AllocationState] = ()) -> Judgement:
    """The share charged for granting ``spec`` (adding ``add``; ``without``: allocations a plan
    takes away first), whether the grant is borrowed and, if so, whether borrowing limits and
    the capacity other shares keep allow it (module docstring). ``spec.pool`` must have shares."""
    index, pool = state.share_index, spec.pool
    leaf = index.leaf_of(spec.namespace)
    parent = index.parent.get(leaf, "") if leaf else ""
    levels = [(leaf, usage_after(index, leaf, pool, add, without))]
    if parent:
        levels.append((parent, usage_after(index, parent, pool, add, without)))
    borrowed = any(over(guarantee_of(index, share, pool), usage) is not None for share, usage in levels)
    if not borrowed:
        return Judgement(leaf, False)
    for share, usage in levels:
        block = _beyond_limit(index, share, pool, usage) if share else None
        if block is not None:
            return Judgement(leaf, True, block)
    return Judgement(leaf, True, _reserved_block(state, spec, leaf, add, without))


def _beyond_limit(index: ShareIndex, share: str, pool: str, usage: Amount) -> str | None:
    held = index.terms_of(share, pool)
    limit = held.borrowing_limit
    if limit is None:
        return None
    for resource, used in zip(SHARE_RESOURCES, usage, strict=True):
        extra = getattr(limit, resource)
        if extra is None:
            continue
        bound = (getattr(held.guaranteed, resource) or 0) + extra
        if used > bound:
            return (f"share {share} would use {text(resource, used)} in pool {pool} with this request, above its "
                    f"guarantee {text(resource, bound - extra)} + borrowing limit "
                    f"{text(resource, extra)} = {text(resource, bound)}")
    return None


def kept(index: ShareIndex, share: str, pool: str) -> Amount:
    """What ``share`` keeps for itself in ``pool`` (its unused guarantee beyond its lending limit:
    guarantee - lending limit - usage, floored at 0 per resource; nothing without a lending limit)."""
    held = index.terms_of(share, pool)
    lend = held.lending_limit
    if lend is None:
        return 0, 0, 0
    used = index.usage_of(share, pool)
    out = []
    for resource in SHARE_RESOURCES:
        guarantee = getattr(held.guaranteed, resource) or 0
        out.append(max(0, guarantee - (getattr(lend, resource) or 0) - getattr(used, resource)))
    return out[0], out[1], out[2]


def _reserved_by_others(index: ShareIndex, leaf: str, pool: str) -> tuple[Amount, list[str]]:
    """Σ of what the other shares keep (:func:`kept`), seen from ``leaf``: its siblings' own, and
    per other top-level share the larger of its own and its children's sum (a parent's guarantee
    covers its children's)."""
    parent = index.parent.get(leaf, "") if leaf else ""
    top = parent or leaf
    totals = [0, 0, 0]
    names: list[str] = []
    children: dict[str, list[str]] = {}
    for share in index.terms.get(pool, {}):
        up = index.parent.get(share, "")
        if up:
            children.setdefault(up, []).append(share)
    tops = {index.parent.get(s, "") or s for s in index.terms.get(pool, {})}
    for share in sorted(tops):
        if share == top:
            continue
        own = kept(index, share, pool)
        below = [kept(index, c, pool) for c in children.get(share, [])]
        summed = tuple(sum(k[i] for k in below) for i in range(3))
        each = tuple(max(own[i], summed[i]) for i in range(3))
        if any(each):
            names.append(share)
            totals = [t + e for t, e in zip(totals, each, strict=True)]
    if parent:
        for sibling in sorted(children.get(parent, [])):
            if sibling != leaf:
                own = kept(index, sibling, pool)
                if any(own):
                    names.append(sibling)
                    totals = [t + e for t, e in zip(totals, own, strict=True)]
    return (totals[0], totals[1], totals[2]), names


def _reserved_block(state: ClusterState, spec: AllocationSpec, leaf: str, add: Amount,
                    without: Sequence[AllocationState]) -> str | None:
    index, pool = state.share_index, spec.pool
    if pool not in index.lenders:
        return None
    reserved, names = _reserved_by_others(index, leaf, pool)
    if not names:
        return None
    capacity = pool_capacity(state, pool)
    total = index.total.get(pool)
    used = [total.milli_tflops, total.vram_bytes, total.gpus] if total is not None else [0, 0, 0]
    for victim in without:
        t, v, g = allocation_amount(victim)
        used = [used[0] - t, used[1] - v, used[2] - g]
    for i, resource in enumerate(SHARE_RESOURCES):
        left = capacity[i] - used[i] - add[i]
        if reserved[i] and left < reserved[i]:
            who = (f"share {names[0]} keeps for its" if len(names) == 1
                   else f"shares {', '.join(names)} keep for their")
            asker = f"share {leaf}" if leaf != UNSHARED else f"namespace {spec.namespace} (in no share)"
            return (f"{asker} would borrow {NAMES[resource]} in pool {pool} that {who} own requests: "
                    f"{text(resource, max(0, left))} would be left of {text(resource, capacity[i])}, "
                    f"and {text(resource, reserved[i])} of unused guarantee is not lent (guarantee - lending limit)")
    return None


def judged(state: ClusterState, spec: AllocationSpec, grant: Grant, *,
           without: Sequence[AllocationState] = ()) -> Grant | Blocked:
    """``grant`` marked with its share and whether it is borrowed, or Blocked (code ``share``) when
    the share may not borrow it (:func:`judge`)."""
    verdict = judge(state, spec, grant_amount(grant.usage, len(grant.gpus)), without=without)
    if verdict.block is not None:
        return Blocked("share", verdict.block)
    return grant._replace(share=verdict.share, borrowed=verdict.borrowed)
