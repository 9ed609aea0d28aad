"""Reclaim: a share below its guarantee takes back capacity other shares borrowed, by preemption.

Rules (docs/allocation.md "Fair share"; Kueue ``reclaimWithinCohort: Any``, KAI's reclaim action,
Volcano's reclaim; Armada #5071/#5073 for order and rate):

* Who reclaims: a request of a share whose grant would keep the share within its guarantee, in a
  pool with shares whose preemption setting is not ``off``, and that fits nowhere now; the grant,
  with the victims gone, must not be borrowed (domain/borrowing.py), so a parent over its
  guarantee only because a sibling borrows is reclaimed from that sibling. A borrowing request,
  and a namespace in no share, never reclaim; they may still preempt by priority
  (domain/preemption.py, TensorFusion's rule).
* Victims: granted allocations of the pool that were **borrowed** when granted, of another share
  (or of a namespace in no share), whatever their priority; not under ``eviction-protection``;
  granted at least the pool's ``reclaim_min_runtime_s`` ago. A gang member goes only with every
  granted member of its gang (all of them eligible). Taking them must never leave a victim's
  share (or its parent, outside the reclaimer's parent) below its own guarantee in a resource it
  sets.
* Order: lowest priority first, then the share most over its guarantee first (the largest excess
  in a resource, as a fraction of the pool's capacity), then the latest granted; per node the
  victims are taken in that order until the request fits (the same dry run as a preemption:
  domain/trial.py), then each is given back, most important first, when the request still fits
  without it (kube-scheduler's reprieve). Nodes are compared by (highest victim priority, number
  of victims, Σ priority) and then node order, among the first nodes in node order that have a plan,
  up to kube-scheduler's candidate count (max(100, 10 % of the pool's nodes): DefaultPreemption's
  minCandidateNodesAbsolute / minCandidateNodesPercentage, as the priority search,
  domain/preemption.py); a node holding no reclaimable allocation is never dry-run.
* Rate: at most the pool's ``reclaim_max_per_minute`` reclaimed allocations per minute (0: no bound).

One decision records it all: AllocationPreempted (``reclaim`` true, a reason naming both shares
and the figures) per victim, then the AllocationGranted (not borrowed) naming them. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from fractions import Fraction
from typing import NamedTuple

from events import decisions as ev
from events.values import SHARE_RESOURCES, AllocationSpec, ShareAmount, priority_of
from services.allocator.domain.borrowing import (
    Amount,
    grant_amount,
    guarantee_of,
    judge,
    over,
    pool_capacity,
    text,
    usage_after,
)
from services.allocator.domain.deadlines import protected_until
from services.allocator.domain.model import GRANTED, AllocationState
from services.allocator.domain.partition import usage as partition_usage
from services.allocator.domain.placement import charge_on, usage_on
from services.allocator.domain.preempting import may_preempt, try_preempt
from services.allocator.domain.preemption import CANDIDATE_PERCENT, MIN_CANDIDATES, NoPlan
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.shares import ShareIndex, allocation_amount
from services.allocator.domain.state import ClusterState
from services.allocator.domain.trial import Fit, Trial
from services.allocator.domain.victims import PRIORITY_OFFSET

MINUTE = timedelta(minutes=1)


class Unit(NamedTuple):
    """What one reclaim takes at once: an allocation, or a gang's granted members; the victims'
    share (leaf, "" for none), highest priority, and sort key (module docstring)."""

    members: tuple[AllocationState, ...]
    share: str
    priority: int
    order: tuple[int, int, float, str]


class ReclaimPlan(NamedTuple):
    """A reclaim that makes the request fit: node, placement, victims (lowest priority first, then
    id), key (highest victim priority, victims, Σ priority + 2³¹) and the leaf share reclaiming."""

    node: str
    fit: Fit
    victims: tuple[AllocationState, ...]
    key: tuple[int, int, int]
    share: str


def lower_amount(spec: AllocationSpec) -> Amount:
    """What ``spec`` adds to its share's usage, known before placement (percent requests count 0
    TFLOPS until the GPUs are chosen)."""
    n = spec.gpu_count
    return spec.request.milli_tflops * n, spec.request.vram_bytes * n, n


def may_reclaim(state: ClusterState, spec: AllocationSpec) -> str | None:
    """None when ``spec`` may reclaim (its grant keeps its leaf share within its guarantee; the
    parent is judged with the victims gone, in :func:`find`), else why not."""
    leaf = state.share_index.leaf_of(spec.namespace)
    if not leaf:
        return f"namespace {spec.namespace} is in no share, so it has no guarantee to reclaim"
    index = state.share_index
    if over(guarantee_of(index, leaf, spec.pool), usage_after(index, leaf, spec.pool, lower_amount(spec), ())):
        return f"share {leaf} would be beyond its guarantee in pool {spec.pool} with this request (borrowing)"
    return None


def may_take(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler) -> bool:
    """False only when :func:`try_take` surely finds nothing, known in O(1): preemption (and so
    reclaim) is off in the pool, or the pool has no shares (no reclaim) and preemption by priority
    cannot help (preempting.may_preempt). In a pool with shares a reclaim may take borrowed work
    of any priority, so only ``off`` answers there."""
    if spec.pool in state.share_index.terms:
        return state.pool_config(spec.pool).preemption != "off"
    return may_preempt(state, spec, scheduler)


def try_take(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler, *,
             from_queue: bool) -> list[ev.AnyEvent] | NoPlan:
    """For a request that fits nowhere now: in a pool with shares, a reclaim when it may
    (:func:`find`), else a preemption by priority whose grant is marked with its share (and
    refused when the share may not borrow it); elsewhere exactly ``try_preempt``."""
    index = state.share_index
    if spec.pool not in index.terms:
        return try_preempt(state, spec, now, scheduler, from_queue=from_queue)
    reclaimed: NoPlan | None = None
    if may_reclaim(state, spec) is None:
        plan = find(state, spec, now, scheduler)
        if isinstance(plan, ReclaimPlan):
            return reclaim_events(state, spec, plan, now, from_queue=from_queue)
        reclaimed = plan
    found = try_preempt(state, spec, now, scheduler, from_queue=from_queue)
    if not isinstance(found, NoPlan):
        return marked(state, spec, found)
    return found if reclaimed is None else neither(found, reclaimed)


def neither(found: NoPlan, reclaimed: NoPlan) -> NoPlan:
    """Why a request that may reclaim got neither a preemption by priority (``found``) nor a
    reclaim (``reclaimed``): code ``fit``, the preemption's reason when it was about nodes, then
    ``no reclaim: ...``."""
    parts = [found.reason] if found.code in ("candidates", "fit") else []
    return NoPlan("fit", "; ".join([*parts, f"no reclaim: {reclaimed.reason}"]), found.searched, found.protected,
                  found.out_of_scope)


def marked(state: ClusterState, spec: AllocationSpec, events: list[ev.AnyEvent]) -> list[ev.AnyEvent] | NoPlan:
    """A priority preemption's events (victims, then the grant) with the grant marked with its share
    and whether it is borrowed, or NoPlan (code ``share``) when the share may not borrow it. The
    events unchanged in a pool without shares."""
    grant = events[-1]
    assert isinstance(grant, ev.AllocationGranted)
    if spec.pool not in state.share_index.terms:
        return events
    victims = [state.allocations[e.allocation_id] for e in events if isinstance(e, ev.AllocationPreempted)]
    gpus = [state.gpus[g] for g in grant.gpus]
    add = partition_usage(grant.charges) if grant.partitions else usage_on(gpus, spec)
    verdict = judge(state, spec, grant_amount(add, len(gpus)), without=victims)
    if verdict.block is not None:
        return NoPlan("share", verdict.block)
    return [*events[:-1], ev.AllocationGranted(
        at=grant.at, spec=grant.spec, node=grant.node, gpus=grant.gpus, charges=grant.charges,
        from_queue=grant.from_queue, preempted=grant.preempted, partitions=grant.partitions, share=verdict.share,
        borrowed=verdict.borrowed)]


def _excess(index: ShareIndex, share: str, pool: str, capacity: Amount) -> Fraction:
    """How far ``share`` is over its guarantee: the largest excess in a resource (the guarantee's
    set resources; every resource when it sets none) as a fraction of the pool's capacity."""
    guarantee = guarantee_of(index, share, pool)
    used = usage_after(index, share, pool, (0, 0, 0), ())
    values = (guarantee.milli_tflops, guarantee.vram_bytes, guarantee.gpus)
    unset = all(v is None for v in values)
    best = Fraction(0)
    for g, u, cap in zip(values, used, capacity, strict=True):
        if cap > 0 and (unset or g is not None):
            best = max(best, Fraction(u - (g or 0), cap))
    return best


class _Units:
    """The pool's reclaimable units (module docstring), read node by node as the search reaches a
    node, so a search that stops at kube-scheduler's candidate count never reads the rest of the
    pool. ``on(node)``: the units holding a member on ``node`` (a gang's unit under each node of a
    member, built once) in reclaim order; ``found``: whether any unit was seen; ``spared``: borrowed
    allocations of other shares seen but spared (protected, too young, or of a gang that is not all
    eligible). The order's share term is the share's rank by excess over its guarantee among every
    share (0: the largest; equal excesses, equal ranks): integers compare where fractions would, in
    the same order."""

    def __init__(self, state: ClusterState, spec: AllocationSpec, leaf: str, now: datetime) -> None:
        self.state, self.pool, self.leaf, self.now = state, spec.pool, leaf, now
        self.index = state.share_index
        self.min_runtime = timedelta(seconds=state.pool_config(spec.pool).reclaim_min_runtime_s)
        capacity = pool_capacity(state, spec.pool)
        excess = {share: _excess(self.index, share, spec.pool, capacity) for share in ("", *state.shares)}
        levels = sorted(set(excess.values()), reverse=True)
        self.rank = {share: levels.index(value) for share, value in excess.items()}
        self.gangs: dict[str, Unit | None] = {}
        self.eligible: dict[str, bool] = {}
        self.found = False
        self.spared = 0

    def ok(self, allocation: AllocationState) -> bool:
        """Whether ``allocation`` may be reclaimed now (module docstring, "Victims")."""
        aid = allocation.spec.allocation_id
        known = self.eligible.get(aid)
        if known is None:
            granted = allocation.granted_at or allocation.requested_at
            until = protected_until(allocation)
            known = self.eligible[aid] = (
                allocation.status == GRANTED and allocation.borrowed and allocation.spec.pool == self.pool
                and self.index.leaf_of(allocation.spec.namespace) != self.leaf
                and (until is None or self.now >= until) and self.now - granted >= self.min_runtime)
        return known

    def unit(self, members: tuple[AllocationState, ...]) -> Unit | None:
        """``members`` as one unit, or None (counted as spared) when one of them may not be taken."""
        if not all(self.ok(m) for m in members):
            self.spared += len(members)
            return None
        self.found = True
        share = self.index.leaf_of(members[0].spec.namespace)
        top = max(priority_of(m.spec) for m in members)
        latest = max((m.granted_at or m.requested_at).timestamp() for m in members)
        return Unit(members, share, top, (top, self.rank[share], -latest, members[0].spec.allocation_id))

    def on(self, node: str) -> list[Unit]:
        """The units with a member on ``node``, in reclaim order."""
        units: list[Unit] = []
        for aid in self.state.nodes[node].workers:
            allocation = self.state.allocations[aid]
            if not (allocation.borrowed and self.index.leaf_of(allocation.spec.namespace) != self.leaf):
                continue
            gang = allocation.spec.gang
            if gang is None:
                unit = self.unit((allocation,))
            elif gang.key in self.gangs:
                unit = self.gangs[gang.key]
            else:
                held = self.state.gangs.get(gang.key)
                ids = sorted(held.granted) if held is not None else [aid]
                unit = self.gangs[gang.key] = self.unit(
                    tuple(self.state.allocations[m] for m in ids if m in self.state.allocations))
            if unit is not None and all(u is not unit for u in units):
                units.append(unit)
        units.sort(key=lambda u: u.order)
        return units


def _floors_hold(index: ShareIndex, pool: str, leaf: str, chosen: Sequence[Unit]) -> bool:
    """Whether taking ``chosen`` leaves every victim share (and its parent, unless it is the
    reclaimer's parent too) at or above its guarantee in each set resource it takes from."""
    removed: dict[str, list[int]] = {}
    mine = index.parent.get(leaf, "")
    for unit in chosen:
        if not unit.share:
            continue
        levels = [unit.share]
        up = index.parent.get(unit.share, "")
        if up and up != mine:
            levels.append(up)
        for member in unit.members:
            amounts = allocation_amount(member)
            for share in levels:
                acc = removed.setdefault(share, [0, 0, 0])
                for i in range(3):
                    acc[i] += amounts[i]
    for share, taken in removed.items():
        guarantee = guarantee_of(index, share, pool)
        used = index.usage_of(share, pool)
        for i, resource in enumerate(SHARE_RESOURCES):
            g = getattr(guarantee, resource)
            if g is not None and taken[i] > 0 and getattr(used, resource) - taken[i] < g:
                return False
    return True


def find(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler) -> ReclaimPlan | NoPlan:
    """The best reclaim for ``spec`` at ``now`` (module docstring), or why there is none. The
    caller has checked :func:`may_reclaim`. Never mutates ``state``."""
    index, pool = state.share_index, spec.pool
    leaf = index.leaf_of(spec.namespace)
    config = state.pool_config(pool)
    if config.preemption == "off":
        return NoPlan("off", f"preemption (and so reclaim) is off in pool {pool}")
    left: int | None = None
    if config.reclaim_max_per_minute:
        recent = sum(1 for at in state.reclaims.get(pool, ()) if at > now - MINUTE)
        left = config.reclaim_max_per_minute - recent
        if left <= 0:
            return NoPlan("rate", f"pool {pool} reclaimed {recent} allocation(s) in the last minute, its "
                                  f"reclaim_max_per_minute")
    units = _Units(state, spec, leaf, now)
    floor = scheduler.pool_floor(state, pool)  # no unit's priority is lower
    need, chain = scheduler.prepare(spec)
    strategy = scheduler.strategy(state, pool)
    indexed = scheduler.indexed(strategy)
    best: ReclaimPlan | None = None
    limited = 0
    limit = max(MIN_CANDIDATES, len(state.pool_nodes.get(pool, ())) * CANDIDATE_PERCENT // 100)
    candidates = 0
    for name in scheduler.node_order(state, pool):
        if candidates >= limit:
            break  # kube-scheduler's candidate count, as the priority search (domain/preemption.py)
        here = units.on(name)
        if not here:
            continue
        trial = Trial(state, name, spec, need, chain, strategy, indexed=indexed, templates=scheduler.profile.templates)
        found = _on_node(trial, name, here, index, pool, leaf)
        if found is None:
            continue
        chosen, fit = found
        victims = tuple(sorted((m for u in chosen for m in u.members),
                               key=lambda v: (priority_of(v.spec), v.spec.allocation_id)))
        if left is not None and len(victims) > left:
            limited += 1
            continue
        if judge(state, spec, grant_amount(fit.usage, len(fit.gpus)), without=victims).borrowed:
            continue  # the exact charge (percent on the chosen GPUs) goes beyond the guarantee
        candidates += 1
        key = (max(priority_of(v.spec) for v in victims), len(victims),
               sum(priority_of(v.spec) + PRIORITY_OFFSET for v in victims))
        if best is None or key < best.key:
            best = ReclaimPlan(name, fit, victims, key, leaf)
            if floor is not None and key == (floor, 1, floor + PRIORITY_OFFSET):
                break  # one victim of the lowest priority there is: no later node can do better
    if best is not None:
        return best
    if not units.found:
        spared = units.spared
        note = f" ({spared} spared: protected, younger than reclaim_min_runtime_s, or gangs)" if spared else ""
        return NoPlan("candidates", f"no borrowed allocation of another share may be reclaimed in pool {pool}{note}")
    if limited:
        return NoPlan("rate", f"every reclaim plan in pool {pool} takes more allocations than its "
                              f"reclaim_max_per_minute leaves this minute ({left})")
    return NoPlan("fit", f"even without every borrowed allocation of other shares it may take, the request does "
                         f"not fit on any node of pool {pool}")


def _on_node(trial: Trial, name: str, units: list[Unit], index: ShareIndex, pool: str, leaf: str
             ) -> tuple[list[Unit], Fit] | None:
    """Take units in order until the request fits on the node, then give back each it still fits
    without, most important first."""
    chosen: list[Unit] = []
    fit: Fit | None = None
    for unit in units:
        if not _floors_hold(index, pool, leaf, [*chosen, unit]):
            continue
        chosen.append(unit)
        here = _on(chosen, name)
        if trial.bound(here):
            fit = trial.fits(here)
            if fit is not None:
                break
    if fit is None:
        return None
    for unit in reversed(list(chosen)):
        rest = [u for u in chosen if u is not unit]
        if not rest:
            break
        here = _on(rest, name)
        if trial.bound(here):
            found = trial.fits(here)
            if found is not None:
                chosen, fit = rest, found
    return chosen, fit


def _on(units: Sequence[Unit], node: str) -> list[AllocationState]:
    return [m for u in units for m in u.members if m.node == node]


def _amount_text(values: Amount, like: ShareAmount) -> str:
    """``values`` in the resources ``like`` sets (every one when it sets none)."""
    unset = all(getattr(like, r) is None for r in SHARE_RESOURCES)
    return ", ".join(text(r, v) for r, v in zip(SHARE_RESOURCES, values, strict=True)
                     if unset or getattr(like, r) is not None)


def reclaim_events(state: ClusterState, spec: AllocationSpec, plan: ReclaimPlan, now: datetime, *,
                   from_queue: bool) -> list[ev.AnyEvent]:
    """AllocationPreempted (``reclaim``) per victim, lowest priority first, then the grant."""
    index, pool = state.share_index, spec.pool
    guarantee = guarantee_of(index, plan.share, pool)
    used = usage_after(index, plan.share, pool, (0, 0, 0), ())
    fit = plan.fit
    gpus = tuple(g.spec.name for g in fit.gpus)
    priority = priority_of(spec)
    out: list[ev.AnyEvent] = []
    for victim in plan.victims:
        vspec = victim.spec
        holder = index.leaf_of(vspec.namespace)
        who = f"share {holder}" if holder else f"namespace {vspec.namespace} (in no share)"
        held = guarantee_of(index, holder, pool)
        over_by = over(held, usage_after(index, holder, pool, (0, 0, 0), ()))
        beyond = (f"it uses {text(over_by, getattr(index.usage_of(holder, pool), over_by))}, its guarantee is "
                  f"{text(over_by, getattr(held, over_by) or 0)}") if over_by else "at its guarantee"
        out.append(ev.AllocationPreempted(
            at=now, allocation_id=vspec.allocation_id, namespace=vspec.namespace, pod=vspec.pod, pool=vspec.pool,
            node=victim.node, gpus=tuple(victim.gpus), preemptor=spec.allocation_id,
            preemptor_namespace=spec.namespace, preemptor_pod=spec.pod, priority=priority_of(vspec),
            preemptor_priority=priority, reclaim=True,
            reason=(f"reclaimed for share {plan.share} by {spec.namespace}/{spec.pod}: share {plan.share} uses "
                    f"{_amount_text(used, guarantee)} of its guarantee {_amount_text(_values(guarantee), guarantee)}"
                    f" in pool {pool}; this allocation was borrowed by {who} ({beyond}); to fit on {plan.node} "
                    f"({', '.join(gpus)})"),
        ))
    charges = fit.charges or tuple(charge_on(g, spec) for g in fit.gpus)
    out.append(ev.AllocationGranted(
        at=now, spec=spec, node=plan.node, gpus=gpus, charges=charges, from_queue=from_queue,
        preempted=tuple(v.spec.allocation_id for v in plan.victims), partitions=fit.partitions, share=plan.share,
        borrowed=False))
    return out


def _values(amount: ShareAmount) -> Amount:
    return amount.milli_tflops or 0, amount.vram_bytes or 0, amount.gpus or 0
