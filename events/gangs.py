"""Gang events: a gang's quorum placed in one decision, a gang timed out, a placed gang degraded.

Part of the event union of :mod:`events.decisions` (re-exported there). Rules: docs/allocation.md
("Gangs"); TensorFusion's gang manager: internal/gang/manager.go.
"""

from __future__ import annotations

from events.base import Event


class GangPlaced(Event, frozen=True, tag="gang_placed"):
    """The quorum of gang ``key`` was placed in one decision (all or none): the AllocationGranted
    of every member placed (``placed``: the quorum plus members beyond it that fit) come just
    before it in the same decision; ``nodes`` are the distinct nodes they went to, sorted.
    Changes no state (the grants do). TensorFusion: the Permit stage of internal/gang/manager.go.
    """

    key: str
    namespace: str
    pool: str
    quorum: int
    placed: int
    nodes: tuple[str, ...] = ()


class GangTimedOut(Event, frozen=True, tag="gang_timed_out"):
    """Gang ``key`` did not reach or place its quorum within ``timeout_s`` of its first member's
    arrival; its ``waiting`` members (allocation ids) leave the queue (an AllocationReleased each,
    ``was_queued``, follows in the same decision). ``present`` of ``quorum`` members were there.
    """

    key: str
    namespace: str
    quorum: int
    present: int
    timeout_s: int
    waiting: tuple[str, ...] = ()
    reason: str = ""


class GangDegraded(Event, frozen=True, tag="gang_degraded"):
    """A placed gang fell below its quorum: member ``allocation_id`` left (released, its node
    removed, or preempted: the event just before this one) and ``members`` are still granted.
    Changes no state; it is the record that the gang runs short (not hidden)."""

    key: str
    namespace: str
    allocation_id: str
    members: int
    quorum: int
