"""The request queue: queued allocations in grant order (QoS critical > high > medium > low, then FIFO).

Owns ordering only; the allocations themselves live in ``ClusterState.allocations``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from events.values import QOS_LEVELS
from services.allocator.domain.model import QUEUED, AllocationState

_QOS_RANK = {qos: rank for rank, qos in enumerate(QOS_LEVELS)}


def qos_rank(qos: str) -> int:
    """0 for critical ... 3 for low; unknown QoS sorts with medium."""
    return _QOS_RANK.get(qos, _QOS_RANK["medium"])


class RequestQueue:
    """Queued allocation ids per QoS class, each class FIFO by ``queue_seq``."""

    __slots__ = ("_classes", "next_seq")

    def __init__(self) -> None:
        self.next_seq = 1
        self._classes: list[dict[str, int]] = [{} for _ in QOS_LEVELS]

    def add(self, allocation: AllocationState) -> None:
        """Enqueue at the back of its QoS class (``queue_seq`` must already be set)."""
        self._classes[qos_rank(allocation.spec.qos)][allocation.spec.allocation_id] = allocation.queue_seq
        self.next_seq = max(self.next_seq, allocation.queue_seq + 1)

    def remove(self, allocation_id: str, qos: str) -> None:
        """Drop an id (granted or released); no-op when absent."""
        self._classes[qos_rank(qos)].pop(allocation_id, None)

    def __len__(self) -> int:
        return sum(len(c) for c in self._classes)

    def __iter__(self) -> Iterator[str]:
        """Allocation ids in grant order: by QoS class, then arrival."""
        for cls in self._classes:
            yield from list(cls)

    def rebuild(self, allocations: Iterable[AllocationState], *, next_seq: int) -> None:
        """Reset from the queued allocations of a snapshot."""
        self._classes = [{} for _ in QOS_LEVELS]
        queued = sorted((a for a in allocations if a.status == QUEUED), key=lambda a: a.queue_seq)
        for allocation in queued:
            self.add(allocation)
        self.next_seq = max(self.next_seq, next_seq)
