"""Preemption: the plan that lets a request that fits nowhere take GPUs from lower-priority work.

kube-scheduler's DefaultPreemption, per GPU (TensorFusion internal/gpuallocator/gpuallocator.go
FilterWithPreempt and CheckQuotaAndFilterSingleNodePreempt; kube-scheduler
pkg/scheduler/framework/plugins/defaultpreemption). Each node of the pool with a candidate
(victims.candidates_on: strictly lower priority, not protected, in scope) may hold a plan, its best
victim set (domain/victim_choice.py: every candidate gone must fit, the highest victim priority
minimised, kube-scheduler's reprieve, an exhaustive search on small sets).

Nodes are compared by kube-scheduler's pickOneNodeForPreemption order: the lowest highest-victim
priority, then the smallest sum of (priority + 2³¹), then the fewest victims; ties go to the
first node in the Scheduler's node order (strategy score, then name). Branch and bound: the first
node with a plan sets the bound; every other node gets a lower bound (``victim_choice.lower_bound``)
and only those that could beat the best plan are searched, most promising first, up to
kube-scheduler's candidate count (:data:`MIN_CANDIDATES`, :data:`CANDIDATE_PERCENT`); before a
node's dry runs its bound is also tightened (``victim_choice.tightened_bound``) and the node given
up when it loses; a node whose lower bound is the lowest key any plan can have (one victim of the
pool's lowest priority) is searched as the walk reaches it, and the walk stops once such a plan is
found (:func:`_searched_early`: the same plan); a failed search is remembered (:class:`Memo`), and
its count of the nodes and refusals kept per node until touched (``NodePlans.census``); a plan that
the walk of the nodes touched since a remembered failure finds leaves the failure remembered (it
still holds for every node untouched since), so the key's next search walks the touched nodes
again instead of the whole pool. A node's
candidates and the bounds that read only the request's per-GPU amounts are shared by every search
key of the same priority, namespace and scope until the node is touched
(``Scheduler.candidate_set``). Pure; never mutates the state.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import NamedTuple, TypeVar, cast

from events.values import AllocationSpec, priority_of
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.need import Need
from services.allocator.domain.node_plans import Census, NodePlans, NodeResult, SortKey
from services.allocator.domain.plan_memo import Memo
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.base import ScanStrategy, Strategy
from services.allocator.domain.trial import Trial, short_of_cpu
from services.allocator.domain.victim_choice import Key, Plan, best_on_node, loses, lower_bound
from services.allocator.domain.victims import PRIORITY_OFFSET, Ranked, Refusals

MIN_CANDIDATES = 100
CANDIDATE_PERCENT = 10
"""Once a plan exists, at most max(100, 10 % of the pool's nodes) further nodes that could beat it
are searched, in node order (kube-scheduler DefaultPreemption: minCandidateNodesAbsolute 100,
minCandidateNodesPercentage 10)."""


class NoPlan(NamedTuple):
    """Why no preemption helps. ``code``: ``off`` (pool setting), ``never`` (the request can never
    fit its pool: not searched), ``priority`` (nothing of lower
    priority in the pool), ``candidates`` (lower-priority work exists but none may be taken:
    protected or out of scope), ``fit`` (even without every candidate the request does not fit)."""

    code: str
    reason: str
    searched: int = 0
    protected: int = 0
    out_of_scope: int = 0


def find(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler) -> Plan | NoPlan:
    """The best preemption plan for ``spec`` in its pool at ``now``, or why there is none."""
    config = state.pool_config(spec.pool)
    if config.preemption == "off":
        return NoPlan("off", f"preemption is off in pool {spec.pool}")
    priority = priority_of(spec)
    floor = scheduler.pool_floor(state, spec.pool)
    if floor is None or floor >= priority:
        return NoPlan("priority", f"no allocation in pool {spec.pool} has a priority below {priority}")
    memo = Memo(state, spec, priority, config.preemption)
    touched = memo.touched(scheduler)
    still = None if touched is None else _still_none(state, spec, scheduler, memo, touched, priority)
    if still is not None:  # the walk of the touched nodes would find no plan: its answer, at once
        memo.remember(scheduler, still, Refusals())
        return _why_not(spec, len(still), Refusals())
    need, chain = scheduler.prepare(spec)
    strategy = scheduler.strategy(state, spec.pool)
    indexed = scheduler.indexed(strategy)
    plans = None
    # Kept node results: none where a per-request pick reads the allocation id, and none read by a
    # walk of the nodes touched since a remembered failure (each was touched since the record was
    # last caught up, which was no later than that failure, so a kept result is never found for
    # it): the record is caught up, and its live lists revive the touched nodes, in the next
    # search that reads it, once for all the changes since.
    if touched is None and (indexed or not cast(ScanStrategy, strategy).per_request):
        plans = scheduler.node_plans((memo.key, spec.limit), state, spec.pool, (memo.validity, strategy), now)
    search = _Search(state, spec, need, chain, strategy, indexed, scheduler, plans)
    limit = max(MIN_CANDIDATES, len(state.pool_nodes.get(spec.pool, ())) * CANDIDATE_PERCENT // 100)
    if plans is not None and plans.live is not None:
        kept = _live_search(search, plans, scheduler, priority, floor, config.preemption, now, limit)
        if kept is None:
            return _none_anywhere(search, plans, scheduler, memo, priority, config.preemption, now)
        memo.forget(scheduler)
        return kept
    refusals = Refusals()
    best: tuple[Plan, int] | None = None
    searched: set[str] = set()
    pending: list[tuple[Key, int, str, NodeResult]] = []
    least = (floor, floor + PRIORITY_OFFSET, 1)  # no plan's key is lower
    first: Key | None = None  # the first plan's key: which nodes are pending (the best may improve early)
    counted = 0
    short: list[tuple[str, Ranked]] = []  # no plan there (CPU): their candidates count only if none is found
    order: Iterable[tuple[int, str]] = enumerate(scheduler.node_order(state, spec.pool, among=touched))
    for at, name in order:
        ranked = scheduler.ranked(state, name)
        if not ranked or ranked[0][0] >= priority:
            if plans is not None:
                plans.idle.add(name)
                search.seen.append(name)
            continue
        if first is not None and (ranked[0][0], ranked[0][0] + PRIORITY_OFFSET, 1) >= first:
            continue
        if (plans is None or name not in plans.nodes) and _short_of_cpu(search, scheduler, name, priority):
            short.append((name, ranked))
            if plans is not None:
                plans.idle.add(name)
                search.seen.append(name)
            continue
        node = search.node(name, ranked, priority, config.preemption, now, refusals)
        if not node.cands:
            continue
        searched.add(name)
        if best is None:
            found = search.on_node(name, node, None)
            best = None if found is None else (found, at)
            first = None if found is None else found.key
            if found is not None and found.key == least:
                break  # one victim of the pool's lowest priority: no node can do better
        elif first is not None and search.bound(name, node) and (bound := search.lower(name, node)) < first:
            counted += 1
            pending.append((bound, at, name, node))
            if bound == least:  # the heap's next pop: searched now (:func:`_searched_early`)
                best, done = _searched_early(search, pending, best, least)
                if done:
                    break
            if counted >= limit:
                break
    if pending:
        assert best is not None  # a node is pending only once a first plan set the bound
        best = _searched_pending(search, pending, best)
    if plans is not None:
        if plans.live is None:
            plans.seed(scheduler.index.sort_keys(spec.pool))
        else:
            plans.settle(search.seen)
    if best is not None:
        if touched is None:  # else the remembered failure still holds for the nodes untouched since
            memo.forget(scheduler)
        return best[0]
    for name, ranked in short:  # the failure's explanation counts their candidates as the walk would have
        if search.node(name, ranked, priority, config.preemption, now, refusals).cands:
            searched.add(name)
    searched |= memo.searched_before(touched)
    memo.remember(scheduler, searched, refusals)
    return _why_not(spec, len(searched), refusals)


def _live_search(search: _Search, plans: NodePlans, scheduler: Scheduler, priority: int, floor: int, scope: str,
                 now: datetime, limit: int) -> Plan | None:
    """The search of :func:`find` over the kept ``live`` node lists instead of every node: the
    same plan, or None when no plan exists (the caller then walks every node, for the exact
    counts of why not). Exact because the nodes left out are, by their kept results, the ones
    the whole walk passes over without effect on a plan: no candidate or not enough to free
    (never a plan, never pending), and before the first plan also no plan at all. Positions are
    the nodes' sort keys (the walk compares positions only with each other)."""
    state = search.state
    live = plans.live
    assert live is not None
    planless = plans.planless
    refusals = Refusals()  # counts only explain a failure, which the whole walk redoes
    best: tuple[Plan, SortKey] | None = None
    for at in live:
        name = at[1]
        if name in planless:
            continue
        ranked = scheduler.ranked(state, name)
        if not ranked or ranked[0][0] >= priority or (name not in plans.nodes
                                                       and _short_of_cpu(search, scheduler, name, priority)):
            plans.idle.add(name)
            search.seen.append(name)
            continue
        node = search.node(name, ranked, priority, scope, now, refusals)
        if not node.cands:
            continue
        found = search.on_node(name, node, None)
        if found is not None:
            best = (found, at)
            break
    if best is None:
        plans.settle(search.seen)
        return None
    least = (floor, floor + PRIORITY_OFFSET, 1)  # no plan's key is lower
    if best[0].key == least:  # one victim of the pool's lowest priority
        plans.settle(search.seen)
        return best[0]
    pending: list[tuple[Key, SortKey, str, NodeResult]] = []
    counted = 0  # the whole walk's pending count (the limit), kept losers included
    kept = plans.nodes
    best_key = best[0].key
    for at in live.irange(minimum=best[1], inclusive=(False, True)):
        name = at[1]
        result = kept.get(name)
        if result is not None and result.lower is not None:
            # Kept candidates whose bound held (``lower`` is computed only then): the whole walk
            # passes it over when the kept lower bound cannot beat the best plan, else makes it
            # pending (the lower bound is never below the node's lowest-priority one-victim key).
            if result.lower < best_key:
                counted += 1
                if not _kept_loser(result, best_key):
                    pending.append((result.lower, at, name, result))
                    if result.lower == least:
                        best, done = _searched_early(search, pending, best, least)
                        if done:
                            break
                if counted >= limit:
                    break
            continue
        ranked = scheduler.ranked(state, name)
        if not ranked or ranked[0][0] >= priority or (result is None
                                                       and _short_of_cpu(search, scheduler, name, priority)):
            plans.idle.add(name)
            search.seen.append(name)
            continue
        if (ranked[0][0], ranked[0][0] + PRIORITY_OFFSET, 1) >= best_key:
            continue
        node = search.node(name, ranked, priority, scope, now, refusals)
        if not node.cands:
            continue
        if search.bound(name, node) and (bound := search.lower(name, node)) < best_key:
            counted += 1
            pending.append((bound, at, name, node))
            if bound == least:
                best, done = _searched_early(search, pending, best, least)
                if done:
                    break
            if counted >= limit:
                break
    best = _searched_pending(search, pending, best)
    plans.settle(search.seen)
    return best[0]


def _none_anywhere(search: _Search, plans: NodePlans, scheduler: Scheduler, memo: Memo, priority: int, scope: str,
                   now: datetime) -> NoPlan:
    """The answer of :func:`find`'s whole walk once :func:`_live_search` found no plan, so that no
    node has one and the walk would find none either: the walk then only counts, for the failure's
    explanation and memo, the nodes with a candidate and the refusals over every node of the pool,
    and keeps as ``idle`` the nodes without lower-priority work or short of CPU. Counted here
    without the walk's per-node plan lookups and bounds, which all come to nothing; and only over
    the nodes touched since the key's last such count (``NodePlans.census``): an untouched node
    without lower-priority work, or with kept candidates, counts as it did then (its candidates,
    their scope and the idle mark are as they were; its kept result was settled when it last
    changed), so its part is read from the census."""
    state, pool = search.state, search.spec.pool
    census = plans.census
    names: Iterable[str]
    if census is None:
        census = plans.census = Census()
        names = scheduler.node_order(state, pool)
    else:
        names, census.recount = census.recount, set()
    refusals = Refusals()
    fresh: set[str] = set()  # nodes with a candidate that are not kept: counted this time only
    kept = plans.nodes
    for name in names:
        node = state.nodes.get(name)
        if node is None or node.pool != pool:
            continue
        ranked = scheduler.ranked(state, name)
        if not ranked or ranked[0][0] >= priority:
            plans.idle.add(name)
            search.seen.append(name)
            census.keep(name, False, 0)
            continue
        if name not in kept and _short_of_cpu(search, scheduler, name, priority):
            plans.idle.add(name)
            search.seen.append(name)
        before = refusals.out_of_scope
        has = bool(search.node(name, ranked, priority, scope, now, refusals).cands)
        if name in kept:
            census.keep(name, has, refusals.out_of_scope - before)
            refusals.out_of_scope = before
        else:
            census.recount.add(name)
            if has:
                fresh.add(name)
    refusals.out_of_scope += census.out_of_scope
    plans.settle(search.seen)
    searched = census.counted | fresh if fresh else census.counted
    memo.remember(scheduler, searched, refusals)
    return _why_not(search.spec, len(searched), refusals)


def _still_none(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler, memo: Memo, touched: set[str],
                priority: int) -> AbstractSet[str] | None:
    """The nodes with a candidate that the walk of ``touched`` (the nodes touched since the
    remembered failure) plus the failure's own would count, when none of the touched nodes can
    hold a plan now; None when one might (the caller then walks them). Only where a dry run's fit
    survives more victims (no quota, no partition templates: ``Trial.monotone``) and scope is the
    whole pool.

    Exact. At the failure no node it searched had a plan even with every candidate gone, and none
    had protected or out-of-scope work below the request's priority (else nothing is remembered).
    A touched node it searched whose touches since were only grants without protection and
    releases of work below the request's priority (``Changes.grew_since``) has at most the room
    with every candidate gone it had then, so still no plan; a touched node it did not search has
    a plan only if it has a candidate now, and then it is walked. Either kind of node, where no
    protected work was granted since, still has no plan when it lacks the request's CPU even with
    every allocation below the request's priority gone (:func:`_short_of_cpu`, whatever room came
    back): it is counted, as the walk counts such a node, and not walked. Touched nodes of other
    pools play no part (the walk is of the request's pool). The counts are the walk's: the touched
    nodes with a candidate now and the failure's others, none refused."""
    if spec.isolation == "partitioned" or state.quotas.get(spec.namespace) is not None:
        return None
    if memo.scope != "cluster" or memo.previous is None:
        return None
    mark, searched = memo.previous[0], memo.previous[2]
    changes = state.changes
    left: list[str] = []
    added: list[str] = []
    for name in touched:
        ranked = scheduler.ranked(state, name)
        has = bool(ranked) and ranked[0][0] < priority
        if name in searched:
            if changes.grew_since(name, priority, mark) and not _still_short(state, spec, scheduler, name, priority,
                                                                             mark):
                return None
            if not has:
                left.append(name)  # its candidates are gone: not counted any more
        elif has:
            node = state.nodes.get(name)
            if node is None or node.pool != spec.pool:
                continue
            if not _still_short(state, spec, scheduler, name, priority, mark):
                return None
            added.append(name)  # candidates now, but no plan: counted, as the walk counts it
    found = searched.difference(left) if left else searched  # (the same set, usually: no copy)
    return found.union(added) if added else found


def _still_short(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler, name: str, priority: int,
                 mark: int) -> bool:
    """Whether node ``name`` surely has no plan for ``spec``: no protected work granted there
    since ``mark``, and it lacks the request's CPU even with every allocation below ``priority``
    gone (:func:`_lacks_cpu`)."""
    if state.changes.protected_since(name, mark):
        return False
    return _lacks_cpu(state, scheduler.prepare(spec)[0], scheduler, name, priority)


def _lacks_cpu(state: ClusterState, need: Need, scheduler: Scheduler, name: str, priority: int) -> bool:
    """Whether node ``name`` lacks ``need``'s CPU even with every allocation below ``priority``
    gone (:func:`_short_of_cpu` without a search)."""
    node = state.nodes.get(name)
    if node is None or not (need.cpu_milli and node.cpu_milli):
        return False
    return short_of_cpu(need, node, scheduler.cpu_below(state, name, priority))


def _short_of_cpu(search: _Search, scheduler: Scheduler, name: str, priority: int) -> bool:
    """Whether the node lacks the request's CPU even with every allocation of a lower priority
    gone: ``Trial.bound``'s CPU check over a superset of any candidate set, so no plan exists there.
    The walks pass such a node over without building its candidates (kept as ``idle`` until it is
    touched); the whole walk of :func:`find` builds them only when no plan is found, for the
    failure's counts."""
    return _lacks_cpu(search.state, search.need, scheduler, name, priority)


_At = TypeVar("_At", int, SortKey)


def _searched_pending(search: _Search, pending: list[tuple[Key, _At, str, NodeResult]], best: tuple[Plan, _At]
                      ) -> tuple[Plan, _At]:
    """Search the pending nodes most promising first ((lower bound, node order): a heap; ``at`` is
    unique, so names and results are never compared) until the next one's bound cannot beat the
    best plan; the best plan then."""
    heapq.heapify(pending)
    while pending:
        bound, at, name, node = heapq.heappop(pending)
        if (bound, at) >= (best[0].key, best[1]):
            break
        found = search.on_node(name, node, best[0].key, tie_ok=at < best[1])
        if found is not None:
            best = (found, at)
    return best


def _searched_early(search: _Search, pending: list[tuple[Key, _At, str, NodeResult]], best: tuple[Plan, _At],
                    least: Key) -> tuple[tuple[Plan, _At], bool]:
    """Search now the node just made pending (``pending[-1]``) whose lower bound is ``least``, the
    lowest key any plan can have, instead of after the walk; True when the best plan then has that
    key, so the walk can stop. The same searches in the same order as the walk's heap: the heap
    pops every node bounded by ``least`` first, in node order (``at``), which is the walk's order,
    each against the best plan at that moment; once the best plan's key is ``least``, the heap
    stops at its next pop (every other pending node, and every node the walk has not reached, has
    a higher bound or comes later in node order), so the walk's remaining nodes change nothing."""
    bound, at, name, node = pending.pop()
    if (bound, at) < (best[0].key, best[1]):
        found = search.on_node(name, node, best[0].key, tie_ok=at < best[1])
        if found is not None:
            best = (found, at)
    return best, best[0].key == least


def _kept_loser(result: NodeResult, best: Key) -> bool:
    """Whether the node's kept plan (or kept "no plan beats (B, t)" with B no better than ``best``,
    or no plan at all) loses against ``best`` and every better plan found later in the search: such
    a pending node's dry run would return None, so it counts toward the candidate limit without
    being queued. A key equal to ``best`` loses too: the node comes after the best plan's node in
    node order (no tie goes its way), and a later best plan has a lower key."""
    plan = result.plan
    if isinstance(plan, Plan):
        return plan.key >= best
    return plan is None and (result.beaten is None or result.beaten[0] >= best)


class _Search:
    """One search's per-node work, read from the Scheduler's :class:`NodePlans` where a node was
    not touched since it was computed (None: nothing kept, as the ReferenceScheduler)."""

    __slots__ = ("amounts", "chain", "ctx", "indexed", "need", "plans", "scheduler", "seen", "spec", "state",
                 "strategy", "templates", "trials")

    def __init__(self, state: ClusterState, spec: AllocationSpec, need: Need, chain: Chain, strategy: Strategy,
                 indexed: bool, scheduler: Scheduler, plans: NodePlans | None) -> None:
        self.state, self.spec, self.need, self.chain = state, spec, need, chain
        self.strategy, self.indexed, self.plans = strategy, indexed, plans
        self.scheduler, self.templates = scheduler, scheduler.profile.templates
        self.amounts = (need.tflops, need.percent, need.vram)
        """What ``Trial.deficits`` reads of the request (the key of ``CandidateSet.deficits``)."""
        self.seen: list[str] = []
        """The nodes whose results this search read or computed."""
        self.trials: dict[str, Trial] = {}
        self.ctx = Context(state.pool_config(spec.pool), allocations=state.allocations)
        """The filters' Context, one per search (every node of the search is in the request's pool)."""

    def node(self, name: str, ranked: Ranked, priority: int, scope: str, now: datetime,
             refusals: Refusals) -> NodeResult:
        """The node's candidates (kept, or computed and kept unless protection refused one or a
        candidate belongs to a gang: both can change without the node being touched); a node
        new to this key takes the candidates another key of the same priority, namespace and
        scope built since the node was last touched (``Scheduler.candidate_set``)."""
        plans = self.plans
        found = None if plans is None else plans.nodes.get(name)
        if found is None:
            cands = self.scheduler.candidate_set(self.state, name, ranked, priority=priority,
                                                 namespace=self.spec.namespace, scope=scope, now=now, refusals=refusals)
            found = NodeResult(cands)
            if plans is not None and cands.keepable:
                plans.nodes[name] = found
        else:
            refusals.out_of_scope += found.out_of_scope
        self.seen.append(name)
        return found

    def _trial(self, name: str, node: NodeResult) -> Trial:
        """The node's Trial, one per node and search (the state does not change during a search),
        sharing the one-victim dry runs kept with the node's result (``NodeResult.singles``) and
        the per-GPU deficits kept with its candidates for every key of the same amounts."""
        trial = self.trials.get(name)
        if trial is None:
            trial = self.trials[name] = Trial(self.state, name, self.spec, self.need, self.chain, self.strategy,
                                              indexed=self.indexed, templates=self.templates, ctx=self.ctx)
            if not node.deficits:
                node.deficits = node.candidates.deficits.setdefault(self.amounts, node.deficits)
            trial.singles, trial.kept_deficits = node.singles, node.deficits
        return trial

    def bound(self, name: str, node: NodeResult) -> bool:
        """``Trial.bound`` of every candidate going (``Trial.frees`` of their sums): the node's CPU
        check, then the GPU part (``Trial.enough``), kept with the candidates for every key of the
        same per-GPU amounts, GPU count and ``shared`` whatever CPU and memory it asks."""
        if node.bound is None:
            cands, need = node.candidates, self.need
            sums = cands.sums
            if short_of_cpu(need, self.state.nodes[name], sums.cpu):
                node.bound = False
            else:
                key = (*self.amounts, need.count, need.shared)
                enough = cands.enough.get(key)
                if enough is None:
                    enough = cands.enough[key] = self._trial(name, node).enough(sums.freed)
                node.bound = enough
        return node.bound

    def lower(self, name: str, node: NodeResult) -> Key:
        """:func:`lower_bound` of the node's candidates."""
        if node.lower is None:
            cands, need = node.candidates, self.need
            key = (*self.amounts, need.count, need.shared)
            lower = cands.lowers.get(key)
            if lower is None:
                lower = cands.lowers[key] = lower_bound(self._trial(name, node), cands)
            node.lower = lower
        return node.lower

    def on_node(self, name: str, node: NodeResult, beat: Key | None, tie_ok: bool = False) -> Plan | None:
        """:func:`best_on_node` for the node: a kept plan when it beats ``beat``; a kept "no plan beats
        (B, t)" when ``beat`` is at least as hard to beat; else computed (and kept). Exact because
        ``best_on_node`` with a bound returns the unbounded plan or None when that plan loses."""
        plan = node.plan
        if isinstance(plan, Plan):
            return None if loses(plan.key, beat, tie_ok) else plan
        if plan is None and (node.beaten is None or (beat is not None and _harder(beat, tie_ok, node.beaten))):
            return None
        found = best_on_node(self._trial(name, node), node.candidates, beat, tie_ok, bound=node.bound, lower=node.lower)
        self.seen.append(name)  # its kept plan changed: NodePlans.settle may take it out of ``live``
        node.plan = found
        node.beaten = None if found is not None or beat is None else (beat, tie_ok)
        return found


def _harder(beat: Key, tie_ok: bool, known: tuple[Key, bool]) -> bool:
    """Whether every key that loses against ``known`` (key, tie_ok) also loses against (``beat``,
    ``tie_ok``), so "no plan beats ``known``" answers this query too."""
    key, known_tie = known
    return key > beat or (key == beat and (known_tie or not tie_ok))


def _why_not(spec: AllocationSpec, searched: int, refusals: Refusals) -> NoPlan:
    counts = dict(searched=searched, protected=refusals.protected, out_of_scope=refusals.out_of_scope)
    parts = []
    if refusals.protected:
        parts.append(f"{refusals.protected} protected by {_PROTECTION}")
    if refusals.out_of_scope:
        parts.append(f"{refusals.out_of_scope} outside namespace {spec.namespace}")
    if not searched:
        return NoPlan("candidates", "no lower-priority allocation may be preempted: " + ", ".join(parts), **counts)
    text = "even without every candidate the request does not fit on any node"
    return NoPlan("fit", text + (f" ({', '.join(parts)})" if parts else ""), **counts)


_PROTECTION = "eviction-protection"


