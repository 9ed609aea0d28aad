"""When granted allocations stop being spared by time: eviction protection and borrowed grants.

``tensor-fusion.ai/eviction-protection: <Go duration>`` (an AllocationSpec attribute) spares an
allocation from preemption and reclaim until its request time + duration (:func:`protected_until`;
the rule is TensorFusion's, applied in domain/victims.py and domain/reclaim.py). A borrowed grant
is spared from reclaim until it has run its pool's ``reclaim_min_runtime_s`` (domain/reclaim.py).

:class:`Deadlines` keeps, per pool, the granted allocations' protection ends and the borrowed
grants' times in order, so "did a block end between the last check and now?" (domain/unblocked.py,
the leader's liveness tick) costs O(log n + ended) instead of a scan of the pool. Derived from the
allocations like the queue: kept by ``evolve`` (grant, release, preemption), rebuilt from a
snapshot, never in it or the digest. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from sortedcontainers import SortedList

from events.durations import go_duration_s
from services.allocator.domain.model import GRANTED, AllocationState

PROTECTION_KEY = "tensor-fusion.ai/eviction-protection"
"""The annotation (an AllocationSpec attribute) that protects an allocation for a duration."""


def parse_duration(text: str) -> float | None:
    """Seconds of a Go duration (``"90s"``, ``"1h30m"``, ``"1.5h"``), or None when malformed or negative
    (:func:`events.durations.go_duration_s`; an attribute from any producer, so no length bound)."""
    seconds = go_duration_s(text.strip())
    return None if seconds is None else float(seconds)


def protected_until(allocation: AllocationState) -> datetime | None:
    """When ``allocation``'s eviction protection ends (request time + duration), None if unprotected."""
    raw = allocation.spec.attributes.get(PROTECTION_KEY)
    seconds = parse_duration(raw) if raw else None
    if not seconds:
        return None
    try:
        return allocation.requested_at + timedelta(seconds=seconds)
    except OverflowError:  # beyond year 9999: protected for good
        return datetime.max.replace(tzinfo=allocation.requested_at.tzinfo)


Entry = tuple[datetime, int, str]
"""(time, 0, allocation id): the 0 lets a bound (time, 1) sort after every entry of that time."""


def _between(entries: SortedList | None, since: datetime | None, now: datetime) -> Iterator[str]:
    """Ids of ``entries`` whose time is in (since, now] (since None: at or before now), in time order."""
    if not entries:
        return iter(())
    start = 0 if since is None else entries.bisect_right((since, 1))
    stop = entries.bisect_right((now, 1))
    return (entry[2] for entry in entries.islice(start, stop))


class Deadlines:
    """Per pool: ``protected`` the (protection end, 0, id) of its granted protected allocations and
    ``borrowed`` the (grant time, 0, id) of its granted borrowed ones, each a SortedList; ``_held``
    id -> (pool, protection entry or None, borrowed entry or None) for removal. O(log n) per change."""

    __slots__ = ("_held", "borrowed", "protected")

    def __init__(self) -> None:
        self.protected: dict[str, SortedList] = {}
        self.borrowed: dict[str, SortedList] = {}
        self._held: dict[str, tuple[str, Entry | None, Entry | None]] = {}

    def add(self, allocation: AllocationState) -> None:
        """Index a granted ``allocation`` (a no-op for one neither protected nor borrowed)."""
        aid, pool = allocation.spec.allocation_id, allocation.spec.pool
        self.remove(aid)
        until = protected_until(allocation)
        protection = None if until is None else (until, 0, aid)
        borrowing = (allocation.granted_at or allocation.requested_at, 0, aid) if allocation.borrowed else None
        if protection is None and borrowing is None:
            return
        if protection is not None:
            self.protected.setdefault(pool, SortedList()).add(protection)
        if borrowing is not None:
            self.borrowed.setdefault(pool, SortedList()).add(borrowing)
        self._held[aid] = (pool, protection, borrowing)

    def remove(self, allocation_id: str) -> None:
        """Forget an allocation (released or preempted); a no-op when it is not indexed."""
        held = self._held.pop(allocation_id, None)
        if held is None:
            return
        pool, protection, borrowing = held
        for lists, entry in ((self.protected, protection), (self.borrowed, borrowing)):
            if entry is not None:
                entries = lists[pool]
                entries.remove(entry)
                if not entries:
                    del lists[pool]

    def rebuild(self, allocations: Iterable[AllocationState]) -> None:
        """Reset from the granted allocations of a snapshot."""
        self.protected, self.borrowed, self._held = {}, {}, {}
        for allocation in allocations:
            if allocation.status == GRANTED:
                self.add(allocation)

    def protection_ended(self, pool: str, since: datetime | None, now: datetime) -> Iterator[str]:
        """Ids of ``pool``'s granted allocations whose protection ended in (since, now]."""
        return _between(self.protected.get(pool), since, now)

    def borrowed_between(self, pool: str, since: datetime | None, now: datetime) -> bool:
        """Whether a granted borrowed allocation of ``pool`` was granted in (since, now]."""
        return next(_between(self.borrowed.get(pool), since, now), None) is not None
