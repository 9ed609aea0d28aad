"""The projection's records of defragmentation campaigns (one per pool: the running or the last one).

Only :mod:`services.allocator.domain.defrag_fold` (called by ``evolve``) mutates them; the rules that
produce their events are in :mod:`services.allocator.domain.defrag_campaign`. They are part of the
snapshot (``StateSnapshot.campaigns``) and of the digest, so a replay reproduces every step.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from events.values import AllocationSpec, Partition, Resources

COMPLETED = "completed"
CANCELLED = "cancelled"


class Reservation(msgspec.Struct, kw_only=True):
    """An open move: allocation ``allocation_id`` (``spec``, its pod ``namespace/pod`` of ``workload``)
    on ``source_node``/``source_gpus`` will move to ``target_node``/``target_gpus``, where ``charges[i]``
    (milli-TFLOPS, bytes; and ``partitions[i]`` for a partitioned request) are held on
    ``target_gpus[i]`` and ``cpu_milli``/``memory_bytes`` on the node until the move completes, is
    cancelled, or ``expires_at``."""

    allocation_id: str
    spec: AllocationSpec
    source_node: str
    source_gpus: list[str]
    target_node: str
    target_gpus: list[str]
    charges: list[Resources]
    expires_at: datetime
    reserved_at: datetime
    partitions: list[Partition] = []
    cpu_milli: int = 0
    memory_bytes: int = 0


class MoveOutcome(msgspec.Struct, kw_only=True):
    """How a move closed: ``status`` :data:`COMPLETED` (``replacement_id`` got the reserved GPUs) or
    :data:`CANCELLED` (``code``, ``reason``), at ``at``; ``source_node``/``target_node`` as planned."""

    allocation_id: str
    status: str
    at: datetime
    source_node: str
    target_node: str
    code: str = ""
    reason: str = ""
    replacement_id: str = ""


class Campaign(msgspec.Struct, kw_only=True):
    """A pool's campaign: its id (the StartDefrag intent id), budget, ``deadline``, the nodes it
    plans to empty (``nodes``, plan order) with ``planned`` moves, the open moves
    (``reservations``: allocation id -> :class:`Reservation`), the closed ones in order
    (``outcomes``), and once ended ``ended_at`` with ``end_code`` (``done``, ``deadline``,
    ``cancelled``) and ``end_reason``."""

    campaign_id: str
    pool: str
    started_at: datetime
    deadline: datetime
    max_moves: int
    max_share_of_namespace_pct: float = 100.0
    max_milli_tflops: int | None = None
    trigger: str = ""
    planned: int = 0
    nodes: list[str] = []
    stopped: str = ""
    reservations: dict[str, Reservation] = {}
    outcomes: list[MoveOutcome] = []
    ended_at: datetime | None = None
    end_code: str = ""
    end_reason: str = ""

    @property
    def running(self) -> bool:
        """True until DefragEnded."""
        return self.ended_at is None

    @property
    def completed(self) -> int:
        """Moves whose replacement got the reserved GPUs."""
        return sum(1 for o in self.outcomes if o.status == COMPLETED)

    @property
    def cancelled(self) -> int:
        """Moves cancelled (their reservation freed)."""
        return sum(1 for o in self.outcomes if o.status == CANCELLED)
