"""Memo: a failed preemption search, remembered by the Scheduler so that the next search for the
same request shape, priority, namespace and scope looks only at the nodes touched since.

Sound because a node that evolve did not touch has the same allocations, charges and free
capacity as when the search failed there; what else could change the answer is checked: the
namespace's quota and usage (quota frees room on every node at once), eviction protection (time)
and scope (a memo is kept only when neither took part), the inventory (the Scheduler drops every
memo on an inventory change). The ReferenceScheduler keeps none, so the equivalence tests check it.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import msgspec

from events.values import AllocationSpec
from services.allocator.domain.need import shape_key
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.victims import Refusals


class Memo:
    """A failed search remembered by the Scheduler, so the next search for the same request shape,
    priority, namespace and scope looks only at the nodes touched since (untouched nodes had no
    plan then and have none now). Kept only when no protected or out-of-scope allocation took part
    (time and scope do not change what such a search saw) and while the namespace's quota and
    usage are unchanged (quota frees room on every node at once). The ReferenceScheduler keeps none."""

    __slots__ = ("key", "mark", "previous", "scope", "validity")

    def __init__(self, state: ClusterState, spec: AllocationSpec, priority: int, scope: str) -> None:
        quota = state.quotas.get(spec.namespace)
        usage = state.usage.get(spec.namespace)
        self.key = (shape_key(spec), priority, spec.namespace, scope)
        self.scope = scope
        self.validity = (quota, None if quota is None or usage is None else msgspec.structs.astuple(usage))
        self.mark = state.changes.seq
        self.previous: tuple[int, object, frozenset[str]] | None = None

    def touched(self, scheduler: Scheduler) -> set[str] | None:
        """The nodes to search: those touched since the remembered failure, or None (all)."""
        found = scheduler.failed_plan(self.key)
        if found is None or found[1] != self.validity:
            return None
        self.previous = found
        return set(scheduler.touched_since(found[0]))

    def searched_before(self, touched: set[str] | None) -> frozenset[str]:
        """Nodes the remembered search had candidates on that were not searched again."""
        if self.previous is None or touched is None:
            return frozenset()
        return self.previous[2] - touched

    def remember(self, scheduler: Scheduler, searched: AbstractSet[str], refusals: Refusals) -> None:
        """Keep this failure (when protection and scope played no part)."""
        if refusals.protected or refusals.out_of_scope:
            scheduler.forget_failed_plan(self.key)
        else:
            scheduler.remember_failed_plan(self.key, (self.mark, self.validity, frozenset(searched)))

    def forget(self, scheduler: Scheduler) -> None:
        """Drop a remembered failure (a whole search found a plan; a plan found by the walk of the
        nodes touched since the failure leaves it, true of every other node, remembered)."""
        scheduler.forget_failed_plan(self.key)

