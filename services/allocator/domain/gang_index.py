"""GangIndex: the live members of each gang, queued (in arrival order) and granted.

An ordering the records imply, like the request queue: kept in :class:`ClusterState` by
``evolve`` (a member queued, granted or gone) and rebuilt from the allocations of a snapshot, so
it is never serialised and cannot disagree with the records. The gang rules that read it are in
:mod:`services.allocator.domain.gang`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from events.values import AllocationSpec
from services.allocator.domain.model import GRANTED, QUEUED, AllocationState


class GangMembers:
    """One gang's live members: ``queued`` allocation ids in arrival order, ``granted`` ids."""

    __slots__ = ("granted", "queued")

    def __init__(self) -> None:
        self.queued: dict[str, None] = {}
        self.granted: set[str] = set()

    @property
    def formed(self) -> bool:
        """True while a member holds GPUs: the gang was placed (later members are ordinary)."""
        return bool(self.granted)


class GangIndex:
    """Gang key -> :class:`GangMembers` (only gangs with a live member)."""

    __slots__ = ("_gangs",)

    def __init__(self) -> None:
        self._gangs: dict[str, GangMembers] = {}

    def get(self, key: str) -> GangMembers | None:
        """The live members of gang ``key``, or None when it has none."""
        return self._gangs.get(key)

    def __iter__(self) -> Iterator[tuple[str, GangMembers]]:
        """(key, members) of every gang with a live member, in first-seen order."""
        return iter(list(self._gangs.items()))

    def _members(self, key: str) -> GangMembers:
        found = self._gangs.get(key)
        if found is None:
            found = self._gangs[key] = GangMembers()
        return found

    def queued(self, spec: AllocationSpec) -> None:
        """``spec`` (a gang member) entered the queue."""
        if spec.gang is not None:
            self._members(spec.gang.key).queued[spec.allocation_id] = None

    def granted(self, spec: AllocationSpec) -> None:
        """``spec`` (a gang member) was granted (from the queue or at once)."""
        if spec.gang is not None:
            members = self._members(spec.gang.key)
            members.queued.pop(spec.allocation_id, None)
            members.granted.add(spec.allocation_id)

    def left(self, spec: AllocationSpec) -> None:
        """``spec`` (a gang member, queued or granted) is no longer live."""
        if spec.gang is None:
            return
        members = self._gangs.get(spec.gang.key)
        if members is None:
            return
        members.queued.pop(spec.allocation_id, None)
        members.granted.discard(spec.allocation_id)
        if not members.queued and not members.granted:
            del self._gangs[spec.gang.key]

    def rebuild(self, allocations: Iterable[AllocationState]) -> None:
        """Reset from a snapshot's allocations (queued members in ``queue_seq`` order)."""
        self._gangs = {}
        live = sorted((a for a in allocations if a.spec.gang is not None), key=lambda a: (a.status, a.queue_seq))
        for allocation in live:
            if allocation.status == GRANTED:
                self.granted(allocation.spec)
            elif allocation.status == QUEUED:
                self.queued(allocation.spec)
