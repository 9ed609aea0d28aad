"""Who may be preempted: strictly lower priority, not under eviction protection, in scope.

The rules are kube-scheduler DefaultPreemption's as TensorFusion patches it (TensorFusion
internal/gpuallocator/gpuallocator.go FilterWithPreempt; the scheduler patch
``patches/scheduler-pdb-1.patch``): a victim's effective priority (``events.values.priority_of``)
must be strictly below the preemptor's; a victim whose request carries
``tensor-fusion.ai/eviction-protection: <duration>`` (a Go duration such as ``30m`` or ``1h30m``,
carried in ``AllocationSpec.attributes``) is spared until its request time + duration; with the
pool's ``preemption: namespace`` only allocations of the preemptor's namespace are candidates.
An unparseable duration protects nothing (as a missing annotation). Pure.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta

from events.values import priority_of
from services.allocator.domain.model import GRANTED, AllocationState, NodeState
from services.allocator.domain.state import ClusterState

PROTECTION_KEY = "tensor-fusion.ai/eviction-protection"
"""The annotation (an AllocationSpec attribute) that protects an allocation for a duration."""

PRIORITY_OFFSET = 2**31
"""Added to each victim's priority in the sum kube-scheduler compares (pickOneNodeForPreemption:
``int64(priority) + MaxInt32 + 1``), so that every victim adds a positive amount."""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float | None:
    """Seconds of a Go duration (``"90s"``, ``"1h30m"``, ``"1.5h"``), or None when malformed or negative."""
    text = text.strip()
    if not text:
        return None
    pos, total = 0, 0.0
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total


def protected_until(allocation: AllocationState) -> datetime | None:
    """When ``allocation``'s eviction protection ends (request time + duration), None if unprotected."""
    raw = allocation.spec.attributes.get(PROTECTION_KEY)
    seconds = parse_duration(raw) if raw else None
    if not seconds:
        return None
    return allocation.requested_at + timedelta(seconds=seconds)


class Refusals:
    """Why allocations on the nodes searched were not candidates, counted for explanations."""

    __slots__ = ("not_lower", "out_of_scope", "protected")

    def __init__(self) -> None:
        self.not_lower = 0
        self.protected = 0
        self.out_of_scope = 0


def candidates_on(state: ClusterState, node: str, *, priority: int, namespace: str, scope: str,
                  now: datetime, refusals: Refusals) -> list[AllocationState]:
    """Granted allocations on ``node`` that a request of ``priority`` in ``namespace`` may preempt
    at ``now`` under the pool's ``scope``, most important first (kube-scheduler's reprieve order:
    higher priority, then earlier grant, then allocation id)."""
    out: list[AllocationState] = []
    for aid in state.nodes[node].workers:
        allocation = state.allocations[aid]
        if allocation.status != GRANTED:
            continue
        if priority_of(allocation.spec) >= priority:
            refusals.not_lower += 1
        elif scope == "namespace" and allocation.spec.namespace != namespace:
            refusals.out_of_scope += 1
        elif (until := protected_until(allocation)) is not None and now < until:
            refusals.protected += 1
        else:
            out.append(allocation)
    out.sort(key=importance)
    return out


def importance(allocation: AllocationState) -> tuple[int, datetime, str]:
    """Sort key, most important first: higher priority, earlier grant, allocation id."""
    granted = allocation.granted_at or allocation.requested_at
    return (-priority_of(allocation.spec), granted, allocation.spec.allocation_id)


def term(allocation: AllocationState) -> int:
    """One victim's addend in kube-scheduler's priority sum (priority + 2³¹, never negative)."""
    return priority_of(allocation.spec) + PRIORITY_OFFSET


def lowest_priority(state: ClusterState, node: str) -> int | None:
    """The lowest effective priority among ``node``'s granted allocations (None: none)."""
    allocations = state.allocations
    return min((priority_of(allocations[a].spec) for a in state.nodes[node].workers), default=None)


class PriorityFloors:
    """Per node its lowest granted priority, per pool how many nodes have each floor (the
    Scheduler's cache, refreshed for the nodes evolve touched): O(1) answers to "is there
    anything of lower priority on this node / in this pool?"."""

    __slots__ = ("_nodes", "_pools")

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[str, int | None]] = {}
        self._pools: dict[str, Counter[int]] = {}

    def drop(self, node: str) -> None:
        """Forget ``node``."""
        previous = self._nodes.pop(node, None)
        if previous is not None and previous[1] is not None:
            counts = self._pools[previous[0]]
            counts[previous[1]] -= 1
            if not counts[previous[1]]:
                del counts[previous[1]]

    def refresh(self, state: ClusterState, node: NodeState) -> None:
        """Recompute ``node``'s floor from its allocations."""
        self.drop(node.name)
        floor = lowest_priority(state, node.name)
        self._nodes[node.name] = (node.pool, floor)
        if floor is not None:
            self._pools.setdefault(node.pool, Counter())[floor] += 1

    def of(self, node: str) -> int | None:
        """``node``'s floor (None: no granted allocation, or unknown)."""
        entry = self._nodes.get(node)
        return None if entry is None else entry[1]

    def pool(self, pool: str) -> int | None:
        """The lowest floor among ``pool``'s nodes (None: nothing granted)."""
        counts = self._pools.get(pool)
        return min(counts) if counts else None
