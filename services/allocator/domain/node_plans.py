"""NodePlans: each node's part of a preemption search, kept per search key until evolve touches the node.

A search (domain/preemption.py) looks at every node of the pool with lower-priority work: its
candidates, the cheap bounds, and on the most promising nodes the dry runs that find the node's
best plan. A saturated pool repeats searches for the same few request shapes after every change
that touched one or two nodes; what the search computed on the other nodes is still exactly
right, so the Scheduler keeps it (:class:`NodePlans`) and the next search for that key redoes
only the touched nodes (KAI scheduler's victim search skips candidate sets it already tried).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from sortedcontainers import SortedList

from services.allocator.domain.model import AllocationState
from services.allocator.domain.state import ClusterState
from services.allocator.domain.trial import Fit
from services.allocator.domain.victims import CandidateSet


class NodeResult:
    """One node's part of a preemption search for one search key, valid until evolve touches the
    node: its candidates (most important first) and how many were out of scope, and, computed on
    first use, ``trial.bound(cands)``, the plan key's lower bound and the node's best plan
    (``plan``: a Plan, None for none, or :data:`UNKNOWN`; ``beaten``: when ``plan`` is None, the
    (key, tie_ok) a plan would have had to beat, None when no plan exists at all)."""

    __slots__ = ("beaten", "bound", "candidates", "cands", "deficits", "lower", "out_of_scope", "plan", "singles")

    def __init__(self, candidates: CandidateSet) -> None:
        self.candidates = candidates
        """The candidates with their sums (shared by every search key of the same priority,
        namespace and scope: ``Scheduler.candidate_set``)."""
        self.cands: list[AllocationState] = candidates.cands
        self.singles: dict[str, Fit | None] = {}
        """The one-victim dry runs made on the node so far (``Trial.single``), by victim id."""
        self.deficits: list[tuple[str, int, int, int]] = []
        """``Trial.deficits`` once computed (empty: not yet)."""
        self.out_of_scope = candidates.out_of_scope
        self.bound: bool | None = None
        self.lower: tuple[int, int, int] | None = None
        self.plan: object = UNKNOWN
        self.beaten: tuple[tuple[int, int, int], bool] | None = None


UNKNOWN = object()
"""A NodeResult's plan not computed yet."""


class Census:
    """What a whole walk that finds no plan counts for its explanation (preemption.py
    ``_none_anywhere``), per node of the pool, kept until evolve touches the node: ``parts`` maps a
    node whose part cannot change untouched (no work of a lower priority, or kept candidates: none
    refused for protection) to its out-of-scope refusals, ``counted`` names those with a candidate,
    ``out_of_scope`` sums ``parts``; ``recount`` names the nodes to count afresh next time (touched
    since, or with candidates that are not kept)."""

    __slots__ = ("counted", "out_of_scope", "parts", "recount")

    def __init__(self) -> None:
        self.parts: dict[str, int] = {}
        self.counted: set[str] = set()
        self.out_of_scope = 0
        self.recount: set[str] = set()

    def keep(self, name: str, counts: bool, out_of_scope: int) -> None:
        """Record ``name``'s part: whether it has a candidate, and its out-of-scope refusals."""
        self.parts[name] = out_of_scope
        self.out_of_scope += out_of_scope
        if counts:
            self.counted.add(name)

    def drop(self, name: str) -> None:
        """Forget ``name``'s part (evolve touched it): counted afresh next time."""
        part = self.parts.pop(name, None)
        if part is not None:
            self.out_of_scope -= part
            self.counted.discard(name)
        self.recount.add(name)

SortKey = tuple[int, str]
"""A node's place in the Scheduler's node order (NodeIndex.sort_key)."""


class NodePlans:
    """Per search key (request shape, limit, priority, namespace, scope), each searched node's
    :class:`NodeResult`, kept by the Scheduler so that a search repeated for the same key redoes
    only the nodes evolve touched since (KAI's victim search skips candidate sets already tried;
    kube-scheduler's dry run is per node). Valid while the namespace's quota and usage, the pool's
    strategy instance and the inventory are as they were (checked by :meth:`catch_up`) and time
    does not run back (eviction protection only ends as time passes; a node where protection
    refused a candidate is not kept). The ReferenceScheduler keeps none: the equivalence tests
    check that a kept result is the one a fresh search computes.

    Once seeded (:meth:`seed`, after a first whole search), ``live`` holds the pool's nodes in node
    order (their sort keys) less those known to play no part: the nodes without work of a lower
    priority (``idle``), without a candidate or whose candidates cannot free enough
    (``Trial.bound``); ``planless`` names the live nodes known to have no plan at all (the walk to
    the first plan passes over them); a touched node is put back (:meth:`catch_up`). ``listed``
    names the nodes whose key is in ``live`` (a set lookup where the sorted list would bisect).
    ``census``: once a search of the key found no plan anywhere, what it counted per node
    (:class:`Census`), so the next such count redoes only the nodes touched since."""

    __slots__ = ("census", "idle", "keys", "listed", "live", "mark", "nodes", "now", "planless", "pool", "validity")

    def __init__(self, validity: object, mark: int, now: datetime, pool: str) -> None:
        self.validity = validity
        self.mark = mark
        self.now = now
        self.pool = pool
        self.nodes: dict[str, NodeResult] = {}
        self.live: SortedList | None = None
        self.planless: set[str] = set()
        self.keys: dict[str, int] = {}
        """Each node's place in node order (the first part of its sort key; the second is its
        name). Ints, not the key tuples: a dict of ints stays out of the cyclic collector's young
        generations as it changes, where one of fresh tuples would be tracked again, and walked
        by every young collection, each time a node is put back."""
        self.listed: set[str] = set()
        self.idle: set[str] = set()
        """Nodes where no plan can exist until touched: no work of a priority below the key's
        (nothing to preempt there), or not even all of it could give back the CPU the request
        lacks (preemption.py ``_short_of_cpu``)."""
        self.census: Census | None = None
        """Once a whole walk found no plan for the key (preemption.py ``_none_anywhere``): its counts."""

    def catch_up(self, state: ClusterState, validity: object, now: datetime, sort_key: Callable[[str], SortKey]
                 ) -> bool:
        """Drop the nodes touched since the last search (and put them back in ``live`` under their
        current sort key); False when the whole record is stale."""
        if validity != self.validity or now < self.now:
            return False
        nodes = self.nodes
        if nodes or self.idle or self.live is not None:
            for name in state.changes.nodes_since(self.mark):
                nodes.pop(name, None)
                self.idle.discard(name)
                self.planless.discard(name)
                if self.census is not None:
                    self.census.drop(name)
                if self.live is not None:
                    self._revive(state, name, sort_key)
        self.mark = state.changes.seq
        self.now = now
        return True

    def _revive(self, state: ClusterState, name: str, sort_key: Callable[[str], SortKey]) -> None:
        live = self.live
        assert live is not None
        old = self.keys.pop(name, None)
        node = state.nodes.get(name)
        key = sort_key(name) if node is not None and node.pool == self.pool else None
        listed = self.listed
        if old is not None and key is not None and old == key[0]:  # same place: back in if settle took it out
            self.keys[name] = old
            if name not in listed:
                live.add(key)
                listed.add(name)
            return
        if old is not None and name in listed:
            live.remove((old, name))
            listed.discard(name)
        if key is not None:
            self.keys[name] = key[0]
            live.add(key)
            listed.add(name)

    def seed(self, ordered: list[SortKey]) -> None:
        """Build ``live`` from every node of the pool (``ordered``: their sort keys in node order,
        ``NodeIndex.sort_keys``), less the kept results that play no part: what :meth:`settle` of
        every kept node would leave, built at once (one list, no sort, no removal one by one)."""
        self.keys = {key[1]: key[0] for key in ordered}
        self.planless = set()
        out = {name for name in [*self.nodes, *self.idle] if self._plays_no_part(name)}
        kept = [key for key in ordered if key[1] not in out] if out else ordered
        self.live = SortedList(kept)
        self.listed = {key[1] for key in kept}

    def settle(self, names: Iterable[str]) -> None:
        """Take out of ``live`` the nodes of ``names`` whose kept result now says they play no part."""
        if self.live is None:
            return
        live, listed, keys = self.live, self.listed, self.keys
        for name in names:
            if self._plays_no_part(name) and name in listed:
                live.remove((keys[name], name))
                listed.discard(name)

    def _plays_no_part(self, name: str) -> bool:
        """Whether ``name``, a node of ``keys``, is known to play no part (idle, no candidate, or
        its candidates cannot free enough); notes it in ``planless`` when it is known to have no
        plan at all."""
        if name not in self.keys:
            return False
        if name in self.idle:
            return True
        result = self.nodes.get(name)
        if result is None:
            return False
        if not result.cands or result.bound is False:
            return True
        if result.plan is None and result.beaten is None:
            self.planless.add(name)
        return False
