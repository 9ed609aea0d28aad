"""ReferenceScheduler: the naive scheduler the optimised one must always agree with.

Every decision looks at every node of the pool in name order, runs every enabled filter on
every GPU, and ranks nodes by computing their scores afresh: no node index, no free-class
pruning, no memo, no cache. It shares only the rules themselves (filters and strategies) with
:class:`~services.allocator.domain.scheduler.Scheduler`, so a test that both decide identically
on random clusters and intent sequences checks the index, the caches and their invalidation.
Fair share needs nothing of its own here: borrowing (domain/borrowing.py) and reclaim
(domain/reclaim.py) are pure rules over the records that ask the scheduler only for its node
order, need, filter chain and strategy, so the ReferenceScheduler applies them over its own
uncached answers (tests/unit/allocator/test_shares_properties.py). Far too slow for a live pool;
for tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from events.values import AllocationSpec, FilterCount
from services.allocator.domain import fairshare
from services.allocator.domain.filters.affinity import preference_weight
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.index import NodeFree
from services.allocator.domain.model import GpuState, NodeState, ShareUsage
from services.allocator.domain.need import Need
from services.allocator.domain.node_plans import NodePlans
from services.allocator.domain.scheduler import Found, Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.base import IndexedStrategy, Strategy
from services.allocator.domain.summaries import Room
from services.allocator.domain.topology import pick_indexed, pick_scan
from services.allocator.domain.victims import CandidateSet, Ranked, Refusals, candidate_set, ranked_on


class ReferenceScheduler(Scheduler):
    """Same interface as Scheduler; every answer computed from the records alone."""

    def sync(self, state: ClusterState) -> None:
        """Nothing to catch up with (nothing is kept)."""

    def strategy(self, state: ClusterState, pool: str) -> Strategy:
        """A fresh strategy instance for the pool's configuration and target workload (no reuse)."""
        self._strategies.clear()
        return super().strategy(state, pool)

    def prepare(self, spec: AllocationSpec) -> tuple[Need, Chain]:
        """A fresh Need and chain."""
        need = Need(spec)
        return need, Chain(self.profile.node_filters, self.profile.gpu_filters, need, self.profile.set_filters)

    def may_fit(self, node: str, need: Need) -> bool:
        """Always possibly (no summary to rule a node out)."""
        return True

    def find(self, state: ClusterState, spec: AllocationSpec, *, restrict: Iterable[str] | None = None
             ) -> Found | None:
        """The strategy's choice among every feasible node of the pool (``restrict`` ignored:
        the optimised scheduler only restricts to nodes where something may have freed)."""
        need, chain = self.prepare(spec)
        config = state.pool_config(need.pool)
        ctx = Context(config, allocations=state.allocations)
        strategy = self.strategy(state, need.pool)
        feasible: list[tuple[NodeState, list[GpuState]]] = []
        for name in sorted(state.pool_nodes.get(need.pool, ())):
            cands = self.node_fit(state, name, need, chain, ctx)
            if cands is not None:
                feasible.append((state.nodes[name], cands))
        if not feasible:
            return None
        if isinstance(strategy, IndexedStrategy):
            def node_score(node: NodeState) -> int:
                members = [state.gpus[g] for g in node.gpus]
                return sum(strategy.node_gpu_score(g, config) for g in members) // len(members) if members else 0
            node, cands = min(feasible, key=lambda p: (
                -preference_weight(need.affinity, p[0].labels), -node_score(p[0]), p[0].name))
            return node, pick_indexed(strategy, cands, need, config)
        scan = strategy
        best: tuple[tuple[float, ...], NodeState, list[GpuState]] | None = None
        for node, cands in feasible:
            members = [state.gpus[g] for g in node.gpus]
            key = scan.rank(node, members, cands, need, config, spec.allocation_id)
            if best is None or key > best[0]:
                best = (key, node, cands)
        assert best is not None
        _, node, cands = best
        members = [state.gpus[g] for g in node.gpus]
        return node, pick_scan(scan, node, members, cands, need, config, spec.allocation_id)

    def node_order(self, state: ClusterState, pool: str, among: Iterable[str] | None = None) -> Iterable[str]:
        """The pool's nodes (or those of ``among``) by the strategy's node score computed afresh (0
        for scan strategies), then name."""
        strategy = self.strategy(state, pool)
        config = state.pool_config(pool)

        def score(name: str) -> int:
            if not isinstance(strategy, IndexedStrategy):
                return 0
            members = [state.gpus[g] for g in state.nodes[name].gpus]
            return sum(strategy.node_gpu_score(g, config) for g in members) // len(members) if members else 0
        names = state.pool_nodes.get(pool, set()) if among is None else set(among) & state.pool_nodes.get(pool, set())
        return sorted(names, key=lambda n: (-score(n), n))

    def rank(self, state: ClusterState, pool: str, share: str | None) -> fairshare.Rank:
        """From the records: the pool's capacity summed over its nodes, the shares' usage recounted
        from the granted allocations."""
        if share is None:
            return fairshare.NO_RANK
        usage = fairshare.recount(state, pool)
        return fairshare.rank_from(state, pool, share, fairshare.pool_capacity(state, pool),
                                   lambda name, _pool: usage.get(name) or ShareUsage())

    def capacity(self, state: ClusterState, pool: str) -> fairshare.Capacity:
        """Summed over the pool's nodes."""
        return fairshare.pool_capacity(state, pool)

    def ranked(self, state: ClusterState, node: str) -> Ranked:
        """Computed from the node's allocations."""
        return ranked_on(state, node)

    def cpu_below(self, state: ClusterState, node: str, priority: int) -> int:
        """Computed from the node's allocations."""
        allocations = state.allocations
        return sum(allocations[aid].spec.cpu_milli for level, aid in ranked_on(state, node) if level < priority)

    def pool_floor(self, state: ClusterState, pool: str) -> int | None:
        """Computed from every node of the pool."""
        floors = [r[0][0] for n in state.pool_nodes.get(pool, ()) if (r := ranked_on(state, n))]
        return min(floors, default=None)

    def failed_plan(self, key: object) -> tuple[int, object, frozenset[str]] | None:
        """Nothing is remembered: every preemption search looks at every node."""
        return None

    def remember_failed_plan(self, key: object, entry: tuple[int, object, frozenset[str]]) -> None:
        """Nothing is remembered."""

    def candidate_set(self, state: ClusterState, node: str, ranked: Ranked, *, priority: int, namespace: str,
                      scope: str, now: datetime, refusals: Refusals) -> CandidateSet:
        """Built afresh (nothing is kept)."""
        return candidate_set(state, ranked, priority=priority, namespace=namespace, scope=scope, now=now,
                             refusals=refusals)

    def node_plans(self, key: object, state: ClusterState, pool: str, validity: object, now: datetime
                   ) -> NodePlans | None:
        """Nothing is kept: every node of every search is computed afresh."""
        return None

    def filter_pass(self, state: ClusterState, spec: AllocationSpec, *, static: bool = False
                    ) -> tuple[list[FilterCount], int]:
        """Every filter on every GPU of the pool."""
        need, chain = self.prepare(spec)
        nodes = [state.nodes[n] for n in sorted(state.pool_nodes.get(spec.pool, ()))]
        ctx = Context(state.pool_config(spec.pool), static=static, allocations=state.allocations)
        return chain.explain(nodes, state.gpus, need, ctx)

    def room(self, state: ClusterState, pool: str) -> Room:
        """The pool's largest free room, computed from every node's GPUs."""
        free = [NodeFree([state.gpus[g] for g in node.gpus if g in state.gpus], node)
                for n in state.pool_nodes.get(pool, ()) if (node := state.nodes.get(n)) is not None]
        gpus = sum(len([g for g in state.nodes[n].gpus if g in state.gpus]) for n in state.pool_nodes.get(pool, ())
                   if n in state.nodes)
        if not free:
            return Room(0, 0, 0, gpus)
        return Room(max(f.tflops for f in free), max(f.vram for f in free), max(f.idle for f in free), gpus)

    def static_fits(self, state: ClusterState, spec: AllocationSpec) -> bool:
        """From the full static pass, computed afresh."""
        return self.static_pass(state, spec)[1] > 0

    def static_pass(self, state: ClusterState, spec: AllocationSpec) -> tuple[list[FilterCount], int]:
        """The static pass, computed afresh."""
        return self.filter_pass(state, spec, static=True)
