"""NodePlans: each node's part of a preemption search, kept per search key until evolve touches the node.

A search (domain/preemption.py) looks at every node of the pool with lower-priority work: its
candidates, the cheap bounds, and on the most promising nodes the dry runs that find the node's
best plan. A saturated pool repeats searches for the same few request shapes after every change
that touched one or two nodes; what the search computed on the other nodes is still exactly
right, so the Scheduler keeps it (:class:`NodePlans`) and the next search for that key redoes
only the touched nodes (KAI scheduler's victim search skips candidate sets it already tried).
"""

from __future__ import annotations

from datetime import datetime

from services.allocator.domain.model import AllocationState
from services.allocator.domain.state import ClusterState


class NodeResult:
    """One node's part of a preemption search for one search key, valid until evolve touches the
    node: its candidates (most important first) and how many were out of scope, and, computed on
    first use, ``trial.bound(cands)``, the plan key's lower bound and the node's best plan
    (``plan``: a Plan, None for none, or :data:`UNKNOWN`; ``beaten``: when ``plan`` is None, the
    (key, tie_ok) a plan would have had to beat, None when no plan exists at all)."""

    __slots__ = ("beaten", "bound", "cands", "lower", "out_of_scope", "plan")

    def __init__(self, cands: list[AllocationState], out_of_scope: int) -> None:
        self.cands = cands
        self.out_of_scope = out_of_scope
        self.bound: bool | None = None
        self.lower: tuple[int, int, int] | None = None
        self.plan: object = UNKNOWN
        self.beaten: tuple[tuple[int, int, int], bool] | None = None


UNKNOWN = object()
"""A NodeResult's plan not computed yet."""


class NodePlans:
    """Per search key (request shape, limit, priority, namespace, scope), each searched node's
    :class:`NodeResult`, kept by the Scheduler so that a search repeated for the same key redoes
    only the nodes evolve touched since (KAI's victim search skips candidate sets already tried;
    kube-scheduler's dry run is per node). Valid while the namespace's quota and usage, the pool's
    strategy instance and the inventory are as they were (checked by :meth:`catch_up`) and time
    does not run back (eviction protection only ends as time passes; a node where protection
    refused a candidate is not kept). The ReferenceScheduler keeps none: the equivalence tests
    check that a kept result is the one a fresh search computes."""

    __slots__ = ("mark", "nodes", "now", "validity")

    def __init__(self, validity: object, mark: int, now: datetime) -> None:
        self.validity = validity
        self.mark = mark
        self.now = now
        self.nodes: dict[str, NodeResult] = {}

    def catch_up(self, state: ClusterState, validity: object, now: datetime) -> bool:
        """Drop the nodes touched since the last search; False when the whole record is stale."""
        if validity != self.validity or now < self.now:
            return False
        nodes = self.nodes
        if nodes:
            for name in state.changes.nodes_since(self.mark):
                nodes.pop(name, None)
        self.mark = state.changes.seq
        self.now = now
        return True
