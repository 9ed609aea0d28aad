"""The request queue: queued allocations in grant order (effective priority, then QoS, then FIFO).

Owns ordering only; the allocations themselves live in ``ClusterState.allocations``. The order is
kube-scheduler's active queue order (PrioritySort: higher pod priority first, then earlier
arrival) with TensorFusion's QoS between the two: the effective priority is
``events.values.priority_of`` (the pod's PriorityClass value, else its QoS's), so two requests of
equal priority (medium and low both map to 0) still go by QoS (critical > high > medium > low).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

from events.values import QOS_LEVELS, priority_of
from services.allocator.domain.model import QUEUED, AllocationState

_QOS_RANK = {qos: rank for rank, qos in enumerate(QOS_LEVELS)}

OrderKey = tuple[int, int, int, str]
"""(−priority, QoS rank, queue_seq, allocation id): ascending is grant order."""


def qos_rank(qos: str) -> int:
    """0 for critical ... 3 for low; unknown QoS sorts with medium."""
    return _QOS_RANK.get(qos, _QOS_RANK["medium"])


def grant_order(allocation: AllocationState) -> OrderKey:
    """The sort key of a queued allocation in grant order (ascending)."""
    spec = allocation.spec
    return (-priority_of(spec), qos_rank(spec.qos), allocation.queue_seq, spec.allocation_id)


class RequestQueue:
    """Queued allocation ids sorted by :func:`grant_order` (O(log n) add and remove)."""

    __slots__ = ("_keys", "_order", "next_seq")

    def __init__(self) -> None:
        self.next_seq = 1
        self._order: SortedList = SortedList()
        self._keys: dict[str, OrderKey] = {}

    def add(self, allocation: AllocationState) -> None:
        """Enqueue in grant order (``queue_seq`` must already be set)."""
        aid = allocation.spec.allocation_id
        self.remove(aid)
        key = self._keys[aid] = grant_order(allocation)
        self._order.add(key)
        self.next_seq = max(self.next_seq, allocation.queue_seq + 1)

    def remove(self, allocation_id: str, qos: str = "") -> None:
        """Drop an id (granted or released); no-op when absent. ``qos`` is accepted for old callers."""
        key = self._keys.pop(allocation_id, None)
        if key is not None:
            self._order.remove(key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        """Allocation ids in grant order (a copy: the queue may change while the caller walks it)."""
        return iter([key[3] for key in self._order])

    def rebuild(self, allocations: Iterable[AllocationState], *, next_seq: int) -> None:
        """Reset from the queued allocations of a snapshot."""
        self._order = SortedList()
        self._keys = {}
        for allocation in allocations:
            if allocation.status == QUEUED:
                self.add(allocation)
        self.next_seq = max(self.next_seq, next_seq)
