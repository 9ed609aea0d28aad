"""The request queue: queued allocations in grant order (effective priority, then QoS, then FIFO).

Owns ordering only; the allocations themselves live in ``ClusterState.allocations``. The order is
kube-scheduler's active queue order (PrioritySort: higher pod priority first, then earlier
arrival) with TensorFusion's QoS between the two: the effective priority is
``events.values.priority_of`` (the pod's PriorityClass value, else its QoS's), so two requests of
equal priority (medium and low both map to 0) still go by QoS (critical > high > medium > low).

Besides the one order, the queue keeps its requests grouped by :func:`group_of` (pool, namespace,
priority, request shape, limit, gang): requests of one group get the same answer from a queue
drain as long as nothing but grants happened in between (domain/process.py ``drain``), so a drain
can try one request of a group and pass over the rest (Armada's scheduling keys).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

from events.values import QOS_LEVELS, AllocationSpec, priority_of
from services.allocator.domain.model import QUEUED, AllocationState
from services.allocator.domain.need import shape_key

_QOS_RANK = {qos: rank for rank, qos in enumerate(QOS_LEVELS)}

OrderKey = tuple[int, int, int, str]
"""(−priority, QoS rank, queue_seq, allocation id): ascending is grant order."""

GroupKey = tuple[object, ...]
"""(pool, namespace, effective priority, shape key, limit, gang key or None): :func:`group_of`."""


def group_of(spec: AllocationSpec) -> GroupKey:
    """What a queue drain's answer for ``spec`` depends on besides the state: where it may go
    (the shape), its quota (namespace, request and limit), what it may preempt (priority,
    namespace) and its gang (``domain.need.shape_key`` leaves out the namespace, limit and QoS)."""
    return (spec.pool, spec.namespace, priority_of(spec), shape_key(spec), spec.limit,
            None if spec.gang is None else spec.gang.key)


def qos_rank(qos: str) -> int:
    """0 for critical ... 3 for low; unknown QoS sorts with medium."""
    return _QOS_RANK.get(qos, _QOS_RANK["medium"])


def grant_order(allocation: AllocationState) -> OrderKey:
    """The sort key of a queued allocation in grant order (ascending)."""
    spec = allocation.spec
    return (-priority_of(spec), qos_rank(spec.qos), allocation.queue_seq, spec.allocation_id)


class RequestQueue:
    """Queued allocation ids sorted by :func:`grant_order` (O(log n) add and remove), and the same
    keys per :func:`group_of` group (``groups``: group -> SortedList of OrderKey, never empty)."""

    __slots__ = ("_group", "_keys", "_order", "groups", "next_seq")

    def __init__(self) -> None:
        self.next_seq = 1
        self._order: SortedList = SortedList()
        self._keys: dict[str, OrderKey] = {}
        self._group: dict[str, GroupKey] = {}
        self.groups: dict[GroupKey, SortedList] = {}

    def add(self, allocation: AllocationState) -> None:
        """Enqueue in grant order (``queue_seq`` must already be set)."""
        aid = allocation.spec.allocation_id
        self.remove(aid)
        key = self._keys[aid] = grant_order(allocation)
        self._order.add(key)
        group = self._group[aid] = group_of(allocation.spec)
        members = self.groups.get(group)
        if members is None:
            members = self.groups[group] = SortedList()
        members.add(key)
        self.next_seq = max(self.next_seq, allocation.queue_seq + 1)

    def remove(self, allocation_id: str, qos: str = "") -> None:
        """Drop an id (granted or released); no-op when absent. ``qos`` is accepted for old callers."""
        key = self._keys.pop(allocation_id, None)
        if key is not None:
            self._order.remove(key)
            group = self._group.pop(allocation_id)
            members = self.groups[group]
            members.remove(key)
            if not members:
                del self.groups[group]

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        """Allocation ids in grant order (a copy: the queue may change while the caller walks it)."""
        return iter([key[3] for key in self._order])

    def rebuild(self, allocations: Iterable[AllocationState], *, next_seq: int) -> None:
        """Reset from the queued allocations of a snapshot."""
        self._order = SortedList()
        self._keys = {}
        self._group = {}
        self.groups = {}
        for allocation in allocations:
            if allocation.status == QUEUED:
                self.add(allocation)
        self.next_seq = max(self.next_seq, next_seq)
