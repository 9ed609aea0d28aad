"""Scheduler: everything a decision derives from the state and keeps between decisions.

Built once from a :class:`Profile` in a composition root (the allocator service, a benchmark,
the trace experiment) and handed to ``decide``/``process``. It owns the filter chains (memoised
per request shape), each pool's strategy instance and its configuration, the node index, the
static-fit cache and the scan strategies' rank caches. Before each use it catches up with the
state from what ``evolve`` reported touched (``ClusterState.changes``): only those nodes are
re-ranked. ``decide`` never mutates the state; it may fill the Scheduler's caches, which are
pure functions of the state, so a fresh Scheduler decides exactly the same (tests hold it to
that against :class:`services.allocator.domain.reference.ReferenceScheduler`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime
from typing import cast

from events.values import AllocationSpec, FilterCount, PoolConfig
from services.allocator.domain import fairshare
from services.allocator.domain.filters.affinity import preference_weight
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.index import NodeIndex
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need, ShapeKey, shape_key, without_node_only
from services.allocator.domain.node_plans import NodePlans
from services.allocator.domain.profile import DEFAULT_PROFILE, Profile
from services.allocator.domain.rank_cache import RankCache
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.base import IndexedStrategy, ScanStrategy, Strategy
from services.allocator.domain.strategies.fragmentation import Workload
from services.allocator.domain.summaries import Room
from services.allocator.domain.target import mix_of
from services.allocator.domain.topology import pick_indexed, pick_scan
from services.allocator.domain.victims import CandidateSet, PriorityIndex, Ranked, Refusals, candidate_set

Found = tuple[NodeState, list[GpuState]]
"""The chosen node and its GPUs in pick order."""

MEMO_LIMIT = 4096
"""Request shapes memoised (chains, static passes) before a memo is cleared."""


def _zero(gpu: GpuState, config: PoolConfig) -> int:
    return 0


class Scheduler:
    """Decisions' derived data for one state at a time (a new state object is indexed afresh).

    ``target`` fixes the target workload of every workload-aware strategy (the trace experiment
    passes the trace's typical pods, the paper's setting); None takes each pool's learned mix
    from the state (:mod:`services.allocator.domain.target`).
    """

    def __init__(self, profile: Profile = DEFAULT_PROFILE, *, target: Workload | None = None,
                 explaining: bool = False) -> None:
        self.profile = profile
        self.target = target
        self.explaining = explaining
        """True on the read side: a queued request's outcome carries the per-filter counts
        (``filter_pass``, cached per request shape and pool version); False on the writer's hot
        path, which leaves them out (the reason text, from ``room``, is the same either way)."""
        self._unfit: dict[ShapeKey, int] = {}
        """Request shapes that fit nowhere -> the change mark of that failed walk (known-unfit)."""
        self._explained: dict[tuple[ShapeKey, bool, int], tuple[list[FilterCount], int]] = {}
        self.index = NodeIndex()
        self._state: ClusterState | None = None
        self._mark = 0
        self._inventory = -1
        self._prepared: dict[ShapeKey, tuple[Need, Chain]] = {}
        self._static: dict[ShapeKey, tuple[list[FilterCount], int]] = {}
        self._static_fits: dict[ShapeKey, bool] = {}
        self._strategies: dict[str, tuple[PoolConfig, object, Strategy]] = {}
        self._indexed: dict[type, bool] = {}
        self.ranks = RankCache()
        self._floors = PriorityIndex()
        self._no_plans: dict[object, tuple[int, object, frozenset[str]]] = {}
        self._node_plans: dict[object, NodePlans] = {}
        self._candidate_sets: dict[tuple[str, int, str, str], tuple[Ranked, datetime, CandidateSet]] = {}
        self._capacities = fairshare.Capacities()

    def sync(self, state: ClusterState) -> None:
        """Catch up with ``state``: re-rank the nodes evolve touched since the last sync (all of
        them for a state not seen before) and drop caches the changes invalidate."""
        changes = state.changes
        if state is not self._state:
            self._state = state
            self.index = NodeIndex()
            self._strategies.clear()
            self.ranks.clear()
            self._static.clear()
            self._static_fits.clear()
            self._floors = PriorityIndex()
            self._no_plans.clear()
            self._node_plans.clear()
            self._candidate_sets.clear()
            self._unfit.clear()
            self._explained.clear()
            self._capacities = fairshare.Capacities()
            touched: Iterable[str] = sorted(state.nodes)
        elif changes.seq == self._mark and changes.inventory == self._inventory:
            return
        else:
            touched = list(changes.nodes_since(self._mark))
        for name in touched:
            self._capacities.refresh(state, name)
            node = state.nodes.get(name)
            if node is None:
                self.index.drop(name)
                self._floors.drop(name)
                continue
            self._floors.refresh(state, node)
            strategy = self.strategy(state, node.pool)
            score = strategy.node_gpu_score if self.indexed(strategy) else _zero  # type: ignore[union-attr]
            self.index.refresh(node, state.gpus, score, state.pool_config(node.pool))
        if changes.inventory != self._inventory:
            self._inventory = changes.inventory
            self._static.clear()
            self._static_fits.clear()
            self._no_plans.clear()
            self._node_plans.clear()
            self._candidate_sets.clear()
            self._unfit.clear()
        self._mark = changes.seq

    def fork(self, state: ClusterState, scratch: ClusterState) -> Scheduler:
        """A Scheduler for ``scratch``, a hypothetical copy-on-write variant of ``state`` whose
        ``changes`` continue ``state``'s from its current ``seq`` (services.allocator.domain.gang_place):
        it shares the memos that are pure functions of a request shape and the inventory, copies
        the node index and the priority index, and starts empty rank caches and failed-preemption
        memos, so it re-ranks only what changes in ``scratch``; this one is unchanged (its caches
        never see the scratch)."""
        self.sync(state)
        child = copy.copy(self)
        child.index = self.index.copy()
        child.ranks = RankCache()
        child._floors = self._floors.copy()
        child._no_plans = {}  # its failed searches hold the scratch's change marks, not this state's
        child._node_plans = {}
        child._candidate_sets = {}
        child._unfit = {}  # the scratch's change log starts at the fork: earlier marks cannot be read there
        child._explained = {}
        child._strategies = dict(self._strategies)
        child._capacities = self._capacities.copy()
        child._state = scratch
        child._mark = scratch.changes.seq
        return child

    def rank(self, state: ClusterState, pool: str, share: str | None) -> fairshare.Rank:
        """The fair-share rank of ``share`` (domain/fairshare.py ``share_of``) in ``pool``: from the
        pool's capacity kept here and the share usage the state keeps (O(1))."""
        if share is None:
            return fairshare.NO_RANK
        return fairshare.rank_from(state, pool, share, self.capacity(state, pool), state.share_index.usage_of)

    def capacity(self, state: ClusterState, pool: str) -> fairshare.Capacity:
        """The capacity of a pool with shares (Ready nodes' GPUs: milli-TFLOPS, VRAM bytes, count),
        kept from its nodes' parts (O(1) after a sync)."""
        self.sync(state)
        return self._capacities.of(pool)

    def strategy(self, state: ClusterState, pool: str) -> Strategy:
        """The pool's strategy instance, built from its configuration (and target workload)."""
        config = state.pool_config(pool)
        cls = self.profile.strategy_class(config.placement)
        mix = (self.target or mix_of(state, pool)) if getattr(cls, "targets_workload", False) else None
        found = self._strategies.get(pool)
        if found is not None and found[0] is config and found[1] is mix:
            return found[2]
        strategy: Strategy = cls()
        if mix is not None and isinstance(strategy, ScanStrategy):
            strategy = strategy.with_workload(mix)
        if found is not None:
            self.ranks.drop_pool(pool)
        self._strategies[pool] = (config, mix, strategy)
        return strategy

    def prepare(self, spec: AllocationSpec) -> tuple[Need, Chain]:
        """``Need`` and filter chain for ``spec``, memoised by request shape."""
        return self._prepare(shape_key(spec), spec)

    def _prepare(self, key: ShapeKey, spec: AllocationSpec) -> tuple[Need, Chain]:
        found = self._prepared.get(key)
        if found is None:
            if len(self._prepared) >= MEMO_LIMIT:
                self._prepared.clear()
            need = Need(spec)
            found = self._prepared[key] = (need, Chain(self.profile.node_filters, self.profile.gpu_filters, need,
                                                        self.profile.set_filters))
        return found

    def may_fit(self, node: str, need: Need) -> bool:
        """False only when the index knows no GPU of ``node`` can hold one share of ``need``."""
        free = self.index.free.get(node)
        return free is not None and free.may_fit(need)

    def node_fit(self, state: ClusterState, name: str, need: Need, chain: Chain, ctx: Context) -> list[GpuState] | None:
        """The candidates of node ``name`` when at least ``need.count`` pass every filter, else None."""
        if not self.may_fit(name, need):
            return None
        if not chain.node_admits(node := state.nodes[name], need, ctx):
            return None
        candidates = chain.node_candidates(node, state.gpus, need, ctx)
        return candidates if chain.fits(node, candidates, need, ctx) else None

    def find(
        self, state: ClusterState, spec: AllocationSpec, *, restrict: Iterable[str] | None = None,
    ) -> Found | None:
        """The node and GPUs the pool's strategy picks for ``spec``, or None; ``restrict`` limits nodes.

        Fits nowhere without walking a node when the pool's summary rules every node out
        (:meth:`PoolRoom.fits_nowhere <services.allocator.domain.summaries.PoolRoom.fits_nowhere>`),
        or, for a request restricted to GPU models, the summaries of those models in the pool do
        (:meth:`NodeIndex.fits_no_model <services.allocator.domain.index.NodeIndex.fits_no_model>`),
        or when the shape was known to fit nowhere at a change mark and no node touched since
        could hold one share of it; otherwise a known-unfit shape walks only the nodes touched
        since (the others are as they were when it fit nowhere). A full walk that fails marks
        the shape known-unfit; a fit forgets it."""
        self.sync(state)
        key = shape_key(spec)
        need, chain = self._prepare(key, spec)
        pool = need.pool
        if self.index.room(pool).fits_nowhere(need) or self._fits_no_model(state, pool, need):
            return None
        whole = restrict is None
        mark = self._unfit.get(key)
        if mark is not None:
            nodes, seq = state.nodes, state.changes.seq
            touched = [n for n in state.changes.nodes_since(mark)
                       if (node := nodes.get(n)) is not None and node.pool == pool and self.may_fit(n, need)]
            if restrict is not None:
                allowed = set(restrict)
                touched = [n for n in touched if n in allowed]
            elif not touched:
                self._unfit[key] = seq  # nothing since could hold it: still known-unfit, as of now
                return None
            restrict = touched
        found = self._find(state, spec, need, chain, restrict)
        if found is not None:
            self._unfit.pop(key, None)
        elif whole:
            if len(self._unfit) >= MEMO_LIMIT:
                self._unfit.clear()
            self._unfit[key] = state.changes.seq
        return found

    def _fits_no_model(self, state: ClusterState, pool: str, need: Need) -> bool:
        """For a request restricted to GPU models: whether no GPU of those models in ``pool`` can
        take it (the pool's per-model rooms, kept from the first such request on)."""
        if need.models is None:
            return False
        if not self.index.tracks_models(pool):
            self.index.track_models(pool, state.nodes, state.gpus)
        return self.index.fits_no_model(pool, need)

    def _find(self, state: ClusterState, spec: AllocationSpec, need: Need, chain: Chain,
              restrict: Iterable[str] | None) -> Found | None:
        pool = need.pool
        ctx = Context(state.pool_config(pool), allocations=state.allocations)
        strategy = self.strategy(state, pool)
        if restrict is None:
            names: Iterable[str] = self.index.ordered(pool, min_class=self.index.min_class(pool, need))
        else:
            names = sorted((n for n in restrict if n in state.nodes and state.nodes[n].pool == pool),
                           key=self.index.sort_key)
        if self.indexed(strategy):
            return self._walk(state, cast(IndexedStrategy, strategy), names, need, chain, ctx)
        strategy = cast(ScanStrategy, strategy)
        if restrict is None and not strategy.per_request:
            general = without_node_only(spec)
            g_need, g_chain = self.prepare(general)
            return self.ranks.best(
                state, strategy, general, g_need, g_chain, ctx,
                may_hold=lambda: self.index.ordered(pool, min_class=self.index.min_class(pool, g_need)),
                admits=lambda node: chain.node_admits(node, need, ctx), free=self.index.free)
        return self._scan(state, strategy, names, spec, need, chain, ctx)

    def indexed(self, strategy: Strategy) -> bool:
        """Whether ``strategy`` is an IndexedStrategy (memoised per class: Protocol checks are slow)."""
        cls = type(strategy)
        known = self._indexed.get(cls)
        if known is None:
            known = self._indexed[cls] = isinstance(strategy, IndexedStrategy)
        return known

    def _walk(self, state: ClusterState, strategy: IndexedStrategy, names: Iterable[str], need: Need,
                 chain: Chain, ctx: Context) -> Found | None:
        if need.affinity is None or not need.affinity.preferred:
            for name in names:
                found = self.node_fit(state, name, need, chain, ctx)
                if found is not None:
                    return state.nodes[name], pick_indexed(strategy, found, need, ctx.config)
            return None
        feasible = [(state.nodes[n], f) for n in names if (f := self.node_fit(state, n, need, chain, ctx)) is not None]
        if not feasible:
            return None
        node, cands = min(feasible, key=lambda p: (
            -preference_weight(need.affinity, p[0].labels), self.index.sort_key(p[0].name)))
        return node, pick_indexed(strategy, cands, need, ctx.config)

    def _scan(self, state: ClusterState, strategy: ScanStrategy, names: Iterable[str], spec: AllocationSpec,
              need: Need, chain: Chain, ctx: Context) -> Found | None:
        aid = spec.allocation_id
        if strategy.rank_by_name:
            return self._first_by_name(state, strategy, names, need, chain, ctx, aid)
        best: tuple[tuple[float, ...], NodeState, list[GpuState], list[GpuState]] | None = None
        for name in names:
            cands = self.node_fit(state, name, need, chain, ctx)
            if cands is None:
                continue
            node = state.nodes[name]
            members = [state.gpus[g] for g in node.gpus]
            key = strategy.rank(node, members, cands, need, ctx.config, aid)
            if best is None or key > best[0]:
                best = (key, node, members, cands)
        if best is None:
            return None
        _, node, members, cands = best
        return node, pick_scan(strategy, node, members, cands, need, ctx.config, aid)

    def _first_by_name(self, state: ClusterState, strategy: ScanStrategy, names: Iterable[str], need: Need,
                       chain: Chain, ctx: Context, aid: str) -> Found | None:
        """:meth:`_scan` for a ``rank_by_name`` strategy: rank every node, then filter best first
        (a stable sort keeps the scan's tie order) and stop at the first feasible node."""
        nodes = [state.nodes[n] for n in names]
        ranks = [strategy.rank(node, (), (), need, ctx.config, aid) for node in nodes]
        for i in sorted(range(len(nodes)), key=ranks.__getitem__, reverse=True):
            node = nodes[i]
            cands = self.node_fit(state, node.name, need, chain, ctx)
            if cands is not None:
                return node, pick_scan(strategy, node, [state.gpus[g] for g in node.gpus], cands, need,
                                       ctx.config, aid)
        return None

    def node_order(self, state: ClusterState, pool: str, among: Iterable[str] | None = None) -> Iterable[str]:
        """The nodes of ``pool`` (or of ``among``) in the index's order (indexed strategies' node score,
        best first, then name; name alone for scan strategies): preemption's tie-break between nodes."""
        self.sync(state)
        if among is None:
            return self.index.ordered(pool)
        return sorted((n for n in among if n in state.nodes and state.nodes[n].pool == pool), key=self.index.sort_key)

    def ranked(self, state: ClusterState, node: str) -> Ranked:
        """``node``'s granted allocations as (effective priority, id), ascending; kept per node and
        refreshed for the nodes evolve touched (call :meth:`sync` first)."""
        return self._floors.ranked(node)

    def cpu_below(self, state: ClusterState, node: str, priority: int) -> int:
        """CPU (millicores) held on ``node`` by allocations of a priority below ``priority``, kept
        with :meth:`ranked` (call :meth:`sync` first)."""
        return self._floors.cpu_below(node, priority)

    def pool_floor(self, state: ClusterState, pool: str) -> int | None:
        """The lowest effective priority of any granted allocation in ``pool`` (None: none), kept
        per pool from the nodes' floors."""
        self.sync(state)
        return self._floors.pool(pool)

    def failed_plan(self, key: object) -> tuple[int, object, frozenset[str]] | None:
        """A remembered failed preemption search (preemption.py ``Memo``): (mark, validity, searched)."""
        return self._no_plans.get(key)

    def remember_failed_plan(self, key: object, entry: tuple[int, object, frozenset[str]]) -> None:
        """Remember a failed preemption search (bounded like the other memos)."""
        if len(self._no_plans) >= MEMO_LIMIT:
            self._no_plans.clear()
        self._no_plans[key] = entry

    def forget_failed_plan(self, key: object) -> None:
        """Forget a remembered failed search."""
        self._no_plans.pop(key, None)

    def node_plans(self, key: object, state: ClusterState, pool: str, validity: object, now: datetime
                   ) -> NodePlans | None:
        """The per-node results of earlier preemption searches for ``key`` (node_plans.NodePlans),
        caught up with the nodes touched since; a fresh record when ``validity`` (quota, usage,
        strategy) changed or time ran back. None: nothing kept (the ReferenceScheduler)."""
        self.sync(state)
        plans = self._node_plans.get(key)
        if plans is None or plans.pool != pool or not plans.catch_up(state, validity, now, self.index.sort_key):
            if len(self._node_plans) >= MEMO_LIMIT:
                self._node_plans.clear()
            plans = self._node_plans[key] = NodePlans(validity, state.changes.seq, now, pool)
        return plans

    def candidate_set(self, state: ClusterState, node: str, ranked: Ranked, *, priority: int, namespace: str,
                      scope: str, now: datetime, refusals: Refusals) -> CandidateSet:
        """``node``'s preemption candidates for a request of ``priority`` in ``namespace`` under
        ``scope`` (victims.candidate_set over ``ranked``, the node's :meth:`ranked` now), kept across
        search keys: every request shape of the same priority, namespace and scope has the same
        candidates on a node. A kept set is read while ``ranked`` is the very tuple it was built
        from (the priority index builds a new one for every node evolve touches, and sync starts
        over for another state) and time has not run back (a candidate's eviction protection only
        ends as time passes); only sets with nothing refused for protection and no gang member are
        kept (``CandidateSet.keepable``). ``refusals`` counts what a fresh build would."""
        key = (node, priority, namespace, scope)
        kept = self._candidate_sets.get(key)
        if kept is not None and kept[0] is ranked and kept[1] <= now:
            refusals.out_of_scope += kept[2].out_of_scope
            return kept[2]
        found = candidate_set(state, ranked, priority=priority, namespace=namespace, scope=scope, now=now,
                              refusals=refusals)
        if found.keepable:
            if len(self._candidate_sets) >= MEMO_LIMIT + 4 * len(state.nodes):
                self._candidate_sets.clear()
            self._candidate_sets[key] = (ranked, now, found)
        return found

    def touched_since(self, mark: int) -> Iterable[str]:
        """Nodes evolve touched after change mark ``mark`` (of the state last synced)."""
        assert self._state is not None
        return self._state.changes.nodes_since(mark)

    def room(self, state: ClusterState, pool: str) -> Room:
        """``pool``'s largest free room now (services.allocator.domain.summaries), O(1)."""
        self.sync(state)
        return self.index.room(pool).room()

    def filter_pass(self, state: ClusterState, spec: AllocationSpec, *, static: bool = False
                    ) -> tuple[list[FilterCount], int]:
        """Per-filter GPU removal counts for ``spec`` over its pool, and how many nodes would fit.
        An ``explaining`` Scheduler keeps the answer per (request shape, pass, pool version): the
        version moves with every change to a node of the pool (its summaries), so a cached answer
        is the one a fresh pass would give."""
        self.sync(state)
        if not self.explaining:
            return self._filter_pass(state, spec, static)
        key = (shape_key(spec), static, self.index.room(spec.pool).version)
        found = self._explained.get(key)
        if found is None:
            if len(self._explained) >= MEMO_LIMIT:
                self._explained.clear()
            found = self._explained[key] = self._filter_pass(state, spec, static)
        return found

    def _filter_pass(self, state: ClusterState, spec: AllocationSpec, static: bool) -> tuple[list[FilterCount], int]:
        need, chain = self.prepare(spec)
        nodes = [state.nodes[n] for n in sorted(state.pool_nodes.get(spec.pool, ()))]
        ctx = Context(state.pool_config(spec.pool), static=static, allocations=state.allocations)
        return chain.explain(nodes, state.gpus, need, ctx, may_fit=lambda name: self.may_fit(name, need))

    def static_fits(self, state: ClusterState, spec: AllocationSpec) -> bool:
        """Whether some node of the pool could ever hold ``spec`` (the static pass finds a fitting
        node): the first such node answers, so only a request that can never fit pays for the
        whole static pass (:meth:`static_pass`, its per-filter counts). Cached like that pass."""
        self.sync(state)
        key = shape_key(spec)
        known = self._static_fits.get(key)
        if known is None:
            cached = self._static.get(key)
            if cached is not None:
                known = cached[1] > 0
            else:
                need, chain = self._prepare(key, spec)
                ctx = Context(state.pool_config(spec.pool), static=True, allocations=state.allocations)
                known = any(chain.node_admits(node := state.nodes[n], need, ctx)
                            and chain.fits(node, chain.node_candidates(node, state.gpus, need, ctx), need, ctx)
                            for n in state.pool_nodes.get(spec.pool, ()))
            if len(self._static_fits) >= MEMO_LIMIT:
                self._static_fits.clear()
            self._static_fits[key] = known
        return known

    def static_pass(self, state: ClusterState, spec: AllocationSpec) -> tuple[list[FilterCount], int]:
        """The static filter pass ("could it ever fit?"), cached by request shape until the inventory changes."""
        self.sync(state)
        key = shape_key(spec)
        cached = self._static.get(key)
        if cached is None:
            if len(self._static) >= MEMO_LIMIT:
                self._static.clear()
            cached = self._static[key] = self.filter_pass(state, spec, static=True)
        return cached
