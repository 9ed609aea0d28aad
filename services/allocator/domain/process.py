"""process(state, intent, now): decide, fold the events in, then grant queued requests that now fit.

The queue is best-effort FIFO within priority (QoS critical > high > medium > low, then arrival):
each queued request is tried in that order and granted if it fits, so a large request does not
block smaller ones behind it. A queued request is only retried where something it needs may have
freed: the nodes whose capacity, liveness or labels changed, or everywhere when its namespace's
quota usage or spec changed or its pool was reconfigured (it fit nowhere else when it was queued,
and capacity elsewhere can only shrink without an event naming that node). A gang that has not
been placed is tried as a unit where its first waiting member stands (domain.gang.retry: the
whole quorum or nothing). The walk goes by queue groups (``drain``), with the same outcome as
trying every request in turn.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from sortedcontainers import SortedList

from events import decisions as ev
from events.intents import AnyIntent
from events.values import AllocationSpec, priority_of
from services.allocator.domain import fairshare, gang
from services.allocator.domain.allocate import attempt, granted
from services.allocator.domain.borrowing import guarantee_of, over, usage_after
from services.allocator.domain.decide import decide
from services.allocator.domain.evolve import evolve
from services.allocator.domain.fairshare import NO_RANK, Rank, RankedKey
from services.allocator.domain.filters.liveness import READY
from services.allocator.domain.model import QUEUED, AllocationState
from services.allocator.domain.need import ShapeKey, shape_key
from services.allocator.domain.placement import Grant
from services.allocator.domain.queue import GroupKey, OrderKey
from services.allocator.domain.reclaim import may_take, try_take
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.shares import ShareIndex
from services.allocator.domain.state import ClusterState


class Hints:
    """What an applied batch of events may have freed: nodes, namespaces (quota), pools."""

    __slots__ = ("namespaces", "nodes", "pools")

    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self.namespaces: set[str] = set()
        self.pools: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.nodes or self.namespaces or self.pools)


def hints_of(state: ClusterState, events: Sequence[ev.AnyEvent]) -> Hints:
    """Collect where capacity or quota may have grown because of ``events``."""
    hints = Hints()
    for e in events:
        match e:
            case ev.AllocationPreempted():
                hints.nodes.add(e.node)
                if e.namespace in state.quotas:
                    hints.namespaces.add(e.namespace)
            case ev.AllocationReleased(was_queued=False) | ev.AllocationResized():
                if isinstance(e, ev.AllocationReleased):
                    hints.nodes.add(e.node)
                elif e.allocation_id in state.allocations:
                    hints.nodes.add(state.allocations[e.allocation_id].node)
                if e.namespace in state.quotas:
                    hints.namespaces.add(e.namespace)
            case ev.NodeRegistered() | ev.GpuCapacityChanged() | ev.GpuPhaseChanged():
                hints.nodes.add(e.node)
            case ev.NodePhaseChanged(phase=phase) if phase == READY:
                hints.nodes.add(e.node)
            case ev.QuotaSet() | ev.QuotaRemoved():
                hints.namespaces.add(e.namespace)
            case ev.PoolConfigured():
                hints.pools.add(e.pool)
            case ev.HeartbeatsChecked():  # time-based blocks ended there (domain/unblocked.py)
                hints.pools.update(e.pools)
            case ev.MoveCancelled():  # a defrag reservation's hold was freed
                hints.nodes.add(e.node)
            case ev.ShareSet() | ev.ShareRemoved():
                hints.pools.update(state.pool_nodes)  # limits, guarantees and members may have changed anywhere
    if state.share_index.terms:
        shared_hints(state, events, hints)
    return hints


_CAPACITY_EVENTS = (ev.NodeRegistered, ev.GpuCapacityChanged, ev.GpuPhaseChanged, ev.NodePhaseChanged)


def shared_hints(state: ClusterState, events: Sequence[ev.AnyEvent], hints: Hints) -> None:
    """What may unblock a request anywhere in a pool with shares (domain/borrowing.py,
    domain/reclaim.py), beyond the nodes :func:`hints_of` names: a release, preemption or resize
    lowers its share's usage, so the requests its usage bounds (its namespaces; with a parent, all
    under that parent) are retried in the whole pool; a borrowed grant is something the requests
    of shares within their guarantee may now reclaim; and where a share lends only part of its
    guarantee, its own grants and any capacity change move what it keeps, so the whole pool is
    retried."""
    index = state.share_index
    for e in events:
        if isinstance(e, ev.AllocationReleased | ev.AllocationPreempted | ev.AllocationResized):
            if e.pool in index.terms:
                hints.namespaces.update(index.family.get(index.leaf_of(e.namespace), ()))
                if e.pool in index.lenders:
                    hints.pools.add(e.pool)
        elif isinstance(e, _CAPACITY_EVENTS):
            if e.pool in index.lenders:
                hints.pools.add(e.pool)
        elif isinstance(e, ev.AllocationGranted) and e.spec.pool in index.terms:
            pool = e.spec.pool
            if index.keeps(e.share, pool):
                hints.pools.add(pool)
            elif e.borrowed:
                for share in index.terms[pool]:
                    if share != e.share and not _over(index, share, pool):
                        hints.namespaces.update(index.family.get(share, ()))


def _over(index: ShareIndex, share: str, pool: str) -> bool:
    """Whether ``share`` uses more than its guarantee in ``pool`` (then none of its requests reclaims)."""
    return over(guarantee_of(index, share, pool), usage_after(index, share, pool, (0, 0, 0), ())) is not None


def drain(state: ClusterState, hints: Hints, now: datetime, scheduler: Scheduler) -> list[ev.AnyEvent]:
    """Grant, in queue order, every queued request that fits where ``hints`` say things changed;
    a retried request that does not fit may preempt (domain/preempting.py) anywhere in its pool.

    A request shape that found no room is not tried again in the same drain (grants only take
    capacity away), nor is a preemption that found no plan retried for the same shape, priority
    and namespace; a preemption frees what its plan does not use, so both memos then start over.

    The queue is walked group by group (``RequestQueue.groups``: pool, namespace, priority,
    shape, limit, gang), merged back into queue order: once a request of a group is tried and
    nothing comes of it (no grant, no preemption), every later request of that group would meet
    the same memos and the same or less room, so the group is passed over until a preemption or
    a gang's retry changes the pool (then it resumes after what the walk has reached). Without
    shares, a group whose requests would all come to nothing that way until such a change (none
    of its shape fits a hinted node and no search may help it: :class:`_Inert`) is passed where
    the walk stands without being tried, as the drain starts and after each grant or change. A
    drain costs the groups the release could matter to, not the queue's length; it grants and
    preempts exactly what the request-by-request walk would (tests/unit/allocator/test_drain.py).

    In pools with shares the order depends on the shares' usage (domain/fairshare.py), so it is
    the order as it stands each time the walk takes its next request: each queued request is tried
    once, always the first untried one under the current ranks (tests/unit/allocator/
    test_fair_order.py holds the drain to that walk). A grant only raises its share's rank (and its
    parent's), so a group's place in the merge is checked when it comes up; a preemption may lower
    ranks, so the merge is rebuilt then. What a passed group's later requests have been reached by
    is kept per share (:class:`_Order`).
    """
    memo = _Memo()
    out: list[ev.AnyEvent] = []
    queue = state.queue
    before = queue.next_seq  # requests queued during the drain are not walked
    order = _Order(state, scheduler)
    heads: list[tuple[RankedKey, GroupKey]] = []
    passed: list[tuple[GroupKey, OrderKey]] = []
    inert = None if order.ranked else _Inert(state, hints, scheduler, memo)
    for group, members in queue.groups.items():
        head = members[0]
        if inert is not None and inert.passes(group, head):
            passed.append((group, head))  # as if tried at its head: nothing
        else:
            heads.append((order.key(group, head), group))
    heapq.heapify(heads)
    grouped: dict[str, bool] = {}
    while heads:
        key, group = heapq.heappop(heads)
        members = queue.groups.get(group)
        if members is None:
            continue
        local = unranked(key)
        at = members.bisect_left(local)
        if at == len(members):
            continue
        if members[at] != local:  # the head left the queue (a gang's grant): resume at the next one
            heapq.heappush(heads, (order.key(group, members[at]), group))
            continue
        if order.ranked:
            fresh = order.key(group, local)
            if fresh != key:  # its share's rank rose since it was pushed: take its new place
                heapq.heappush(heads, (fresh, group))
                continue
        allocation = state.allocations.get(local[3])
        if allocation is None or allocation.status != QUEUED or allocation.queue_seq >= before:
            _resume(heads, order, members, local, group)
            continue
        result = _one(state, allocation, hints, now, scheduler, memo, out)
        if result is not _NOTHING and order.ranked:
            order.moved(key, None if result is _CHANGED else allocation.spec.pool)
            if result is _CHANGED:  # ranks may have fallen: every place in the merge is taken again
                heads = [(order.key(g, unranked(k)), g) for k, g in heads]
                heapq.heapify(heads)
        if result is _CHANGED:  # the pool has more room somewhere: every group resumes after what was reached
            for other, reached in passed:
                _resume(heads, order, queue.groups.get(other), order.reached(other, reached, key), other)
            passed.clear()
        if (result is _NOTHING and allocation.spec.gang is None
                and _groupable(state, allocation.spec.pool, scheduler, grouped)):
            passed.append((group, local))
        else:
            _resume(heads, order, queue.groups.get(group), local, group)
        if result is not _NOTHING and not order.ranked:  # what became inert is passed where it stands
            heads = _Inert(state, hints, scheduler, memo).sift(heads, passed)
    return out


def unranked(key: RankedKey) -> OrderKey:
    """The queue key inside a ranked key (its share's rank left out)."""
    return key[0], key[1], key[3], key[4]


Reached = tuple[int, int, float, str]
"""A bound in a group's own order (OrderKey with ±inf or a seq in third place): its requests below
it have been reached by the walk."""


class _Order:
    """One drain's view of the order: each share's rank as the walk last saw it, per (pool, share)
    bucket, and per bucket how far the walk has reached into its requests.

    When the walk tries a request at ranked key K, every untried request of a bucket whose key is
    below K has been reached (the walk always takes the smallest); in the bucket's own order that
    is the requests below ``threshold(K, rank)``. A bucket's rank changes only when its share's
    usage does (a grant or a preemption in its pool): before that the bound reached under the old
    rank is kept (``_reached``), so a passed group resumes after the larger of the two. Without
    shares every rank is NO_RANK and the bound is K's own key: the drain as it always was.
    """

    __slots__ = ("_ranks", "_reached", "ranked", "scheduler", "state")

    def __init__(self, state: ClusterState, scheduler: Scheduler) -> None:
        self.state, self.scheduler = state, scheduler
        self.ranked = bool(state.share_index)
        self._ranks: dict[tuple[str, str | None], Rank] = {}
        self._reached: dict[tuple[str, str | None], Reached] = {}

    def _bucket(self, group: GroupKey) -> tuple[str, str | None]:
        pool = str(group[0])
        return pool, fairshare.share_of(self.state, pool, str(group[1]))

    def _rank(self, bucket: tuple[str, str | None]) -> Rank:
        found = self._ranks.get(bucket)
        if found is None:
            found = self._ranks[bucket] = self.scheduler.rank(self.state, *bucket)
        return found

    def key(self, group: GroupKey, local: OrderKey) -> RankedKey:
        """``local``'s place in the merged order (its group's share's rank as last seen)."""
        if not self.ranked:
            return local[0], local[1], NO_RANK, local[2], local[3]
        return fairshare.ranked_key(local, self._rank(self._bucket(group)))

    def moved(self, at: RankedKey, pool: str | None) -> None:
        """A try at ``at`` changed usage in ``pool`` (None: anywhere): keep each bucket's reached
        bound under its old rank, then take the ranks afresh."""
        for bucket, rank in self._ranks.items():
            if pool is None or bucket[0] == pool:
                bound = threshold(at, rank)
                kept = self._reached.get(bucket)
                if kept is None or bound > kept:
                    self._reached[bucket] = bound
        for bucket in list(self._ranks):
            if pool is None or bucket[0] == pool:
                self._ranks[bucket] = self.scheduler.rank(self.state, *bucket)

    def reached(self, group: GroupKey, own: OrderKey, at: RankedKey) -> Reached | OrderKey:
        """Where a passed ``group`` (passed at its request ``own``) resumes after a try at ``at``
        that changed the pool (:meth:`moved` has kept the bound reached at ``at``)."""
        if not self.ranked:
            return at[0], at[1], at[3], at[4]
        kept = self._reached.get(self._bucket(group))
        return own if kept is None or own > kept else kept


def threshold(at: RankedKey, rank: Rank) -> Reached:
    """The requests of a bucket ranked ``rank`` that are below ``at`` in the merged order, as a bound
    in the bucket's own order: all of (priority, QoS) ``at``'s, none, or those before its arrival."""
    if rank < at[2]:
        return at[0], at[1], math.inf, ""
    if rank > at[2]:
        return at[0], at[1], -math.inf, ""
    return at[0], at[1], at[3], at[4]


def _resume(heads: list[tuple[RankedKey, GroupKey]], order: _Order, members: SortedList | None,
            after: object, group: GroupKey) -> None:
    """Put ``group`` back in the walk at its first request after ``after`` (if any)."""
    if members is not None:
        at = members.bisect_right(after)
        if at < len(members):
            heapq.heappush(heads, (order.key(group, members[at]), group))


class _Inert:
    """Which queue groups a drain without shares can pass over where the walk stands, without
    trying them: those whose every request the walk would try with nothing coming of it (no
    grant, no search) until a try changes the pool (_CHANGED); each is passed as if tried at the
    request the walk would take next (``drain``), and such a change resumes it like any passed
    group. Asked for every group as the drain starts and again after each grant or change.

    A group is inert when its pool and namespace are not in ``hints`` (its tries are restricted to
    the hinted nodes) and either none of its pool's nodes is hinted, or no search may help it
    (``reclaim.may_take``) and its shape fits none of the hinted nodes (``Scheduler.may_fit``).
    Both answers hold until its requests' turns, as long as only grants happen: a grant only takes
    room, and every request granted before them is at least as important (the walk goes by
    priority first), so the pool's lowest granted priority, all ``may_take`` reads, stays at or
    above theirs. Gangs are tried as always. The passed requests add nothing to the drain's memos
    that a later try could read: a preemption memo of the same (shape, priority, namespace) is one
    of the same pool and priority, whose try ``may_take`` refuses all the same."""

    __slots__ = ("hints", "memo", "scheduler", "state")

    def __init__(self, state: ClusterState, hints: Hints, scheduler: Scheduler, memo: _Memo) -> None:
        self.state, self.hints, self.scheduler, self.memo = state, hints, scheduler, memo

    def passes(self, group: GroupKey, head: OrderKey) -> bool:
        """Whether ``group`` (the walk's next request of it: ``head``) is inert (class docstring)."""
        pool, hints, memo = str(group[0]), self.hints, self.memo
        if group[5] is not None or pool in hints.pools or group[1] in hints.namespaces:
            return False
        state, scheduler = self.state, self.scheduler
        nodes = memo.hinted(state, hints, pool)
        if not nodes:
            return True
        allocation = state.allocations.get(head[3])
        if allocation is None or allocation.status != QUEUED:
            return False  # the walk steps over it
        spec = allocation.spec
        if memo.takes(state, spec, scheduler, cast(int, group[2])):
            return False
        return not _may_fit(state, spec, scheduler, nodes)

    def sift(self, heads: list[tuple[RankedKey, GroupKey]], passed: list[tuple[GroupKey, OrderKey]]
             ) -> list[tuple[RankedKey, GroupKey]]:
        """The walk's ``heads`` less the inert groups, which join ``passed`` at the request the walk
        would take next (a heap again); entries whose group has no request left are dropped, as
        the walk drops them."""
        kept: list[tuple[RankedKey, GroupKey]] = []
        groups = self.state.queue.groups
        for key, group in heads:
            members = groups.get(group)
            if members is None:
                continue
            at = members.bisect_left(unranked(key))
            if at == len(members):
                continue
            head = members[at]
            if self.passes(group, head):
                passed.append((group, head))
            else:
                kept.append((key, group))
        heapq.heapify(kept)
        return kept


def _groupable(state: ClusterState, pool: str, scheduler: Scheduler, known: dict[str, bool]) -> bool:
    """Whether a failed request speaks for its group in ``pool``: not where the strategy's pick reads
    the allocation id (its GPUs, hence a percent request's quota charge, may differ per request)."""
    found = known.get(pool)
    if found is None:
        strategy = scheduler.strategy(state, pool)
        found = known[pool] = scheduler.indexed(strategy) or not getattr(strategy, "per_request", False)
    return found


class _Memo:
    """One drain's memos: shapes without room (by whether the walk was whole), gangs tried, and
    (shape, priority, namespace) without a preemption plan; and two answers that hold until a try
    grants or frees something: per pool its hinted nodes (``hints.nodes`` grows only with a
    preemption or a gang's retry) and per (pool, priority) ``reclaim.may_take`` (which reads the
    pool's lowest granted priority)."""

    __slots__ = ("_hinted", "_takes", "gangs", "no_plan", "no_room")

    def __init__(self) -> None:
        self.no_room: set[tuple[ShapeKey, bool]] = set()
        self.gangs: set[str] = set()
        self.no_plan: set[tuple[ShapeKey, int, str]] = set()
        self._hinted: dict[str, list[str]] = {}
        self._takes: dict[tuple[str, int], bool] = {}

    def hinted(self, state: ClusterState, hints: Hints, pool: str) -> list[str]:
        """The nodes of ``hints`` in ``pool`` (a retried request's only candidates)."""
        found = self._hinted.get(pool)
        if found is None:
            found = self._hinted[pool] = [n for n in hints.nodes if n in state.nodes and state.nodes[n].pool == pool]
        return found

    def takes(self, state: ClusterState, spec: AllocationSpec, scheduler: Scheduler, priority: int) -> bool:
        """``reclaim.may_take`` for ``spec`` (of effective ``priority``; it reads only that and the pool)."""
        key = (spec.pool, priority)
        found = self._takes.get(key)
        if found is None:
            found = self._takes[key] = may_take(state, spec, scheduler)
        return found

    def moved(self, *, freed: bool) -> None:
        """A try granted (``freed``: or preempted, or retried a gang): drop the answers kept."""
        self._takes.clear()
        if freed:
            self._hinted.clear()


_NOTHING, _GRANTED, _CHANGED = object(), object(), object()
"""What trying one queued request did: nothing, a grant (room only taken), or a preemption or a
gang's retry (room may have been freed)."""


def _one(state: ClusterState, allocation: AllocationState, hints: Hints, now: datetime, scheduler: Scheduler,
         memo: _Memo, out: list[ev.AnyEvent]) -> object:
    """Try one queued request, as the queue order reaches it; folds and records what it decides."""
    spec = allocation.spec
    if spec.gang is not None and gang.unplaced(state, spec):
        if spec.gang.key in memo.gangs:  # a gang is tried once, where its first member waits
            return _NOTHING
        memo.gangs.add(spec.gang.key)
        made = gang.retry(state, spec.gang, hints, now, scheduler)
        out.extend(made)
        if not made:
            return _NOTHING
        memo.moved(freed=True)
        return _CHANGED
    restrict: list[str] | None = None
    if spec.pool not in hints.pools and spec.namespace not in hints.namespaces:
        restrict = memo.hinted(state, hints, spec.pool)
        if not restrict:
            return _NOTHING
    shape = shape_key(spec)
    no_room = memo.no_room
    if ((shape, True) not in no_room and (shape, restrict is None) not in no_room
            and (restrict is None or _may_fit(state, spec, scheduler, restrict))):
        outcome = attempt(state, spec, scheduler, restrict=restrict)
        if isinstance(outcome, Grant):
            event = granted(spec, outcome, now=now, from_queue=True)
            evolve(state, event)
            out.append(event)
            memo.moved(freed=False)
            return _GRANTED
        if outcome.code == "capacity":
            no_room.add((shape, restrict is None))
    priority = priority_of(spec)
    tried = (shape, priority, spec.namespace)
    if tried in memo.no_plan:
        return _NOTHING
    if not memo.takes(state, spec, scheduler, priority):  # no search: the same answer, at once
        memo.no_plan.add(tried)
        return _NOTHING
    preempting = try_take(state, spec, now, scheduler, from_queue=True)
    if isinstance(preempting, list):
        for change in preempting:
            evolve(state, change)
        out.extend(preempting)
        hints.nodes.add(preempting[-1].node)  # type: ignore[union-attr]
        no_room.clear()
        memo.no_plan.clear()
        memo.moved(freed=True)
        return _CHANGED
    memo.no_plan.add(tried)
    return _NOTHING


def _may_fit(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler, nodes: list[str]) -> bool:
    """False only when the Scheduler's index knows ``spec`` fits none of ``nodes``."""
    scheduler.sync(state)
    need = scheduler.prepare(spec)[0]
    return any(scheduler.may_fit(n, need) for n in nodes)


def process(state: ClusterState, intent: AnyIntent, now: datetime, scheduler: Scheduler | None = None
            ) -> list[ev.AnyEvent]:
    """Decide ``intent``, apply its events to ``state`` and drain the queue; returns every event
    (the intent's own first, then grants from the queue) in the order they were applied.

    ``scheduler``: the caller's long-lived Scheduler (a fresh one when None: one-off use only,
    it indexes the whole state). Bind it once, e.g. ``functools.partial(process, scheduler=s)``.
    """
    scheduler = scheduler or Scheduler()
    events = decide(state, intent, now, scheduler)
    for event in events:
        evolve(state, event)
    if len(state.queue):
        hints = hints_of(state, events)
        if hints:
            drained = drain(state, hints, now, scheduler)
            events.extend(drained)
            while drained and state.share_index.terms and len(state.queue):  # what the drain granted,
                again = hints_of(state, drained)  # preempted or reclaimed may unblock a request it walked past
                if not again:
                    break
                drained = drain(state, again, now, scheduler)
                events.extend(drained)
    return events
