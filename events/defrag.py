"""Defragmentation campaign intents and events: a consolidation plan executed move by move, with each
target reserved before its source is evicted (docs/allocation.md, "Executing a plan: defrag run").

Part of the intent union of :mod:`events.intents` and the event union of :mod:`events.decisions`
(re-exported there). TensorFusion's counterpart: internal/controller/gpupool_defrag.go (compaction
strategy 2, ``NodeCompaction.Defrag``), which evicts without reserving the target.

A campaign's life in the log: ``DefragStarted`` and one ``MoveReserved`` per planned move in one
decision (the reservation holds the target GPUs' capacity in the projection, so nothing else is
granted there); the source pod is evicted by the binder through the Eviction API; the replacement
request of the same workload is granted the reserved GPUs (``MoveCompleted`` just before its
``AllocationGranted``); a refused eviction (``CancelMove``), the deadline, an expired reservation or
``CancelDefrag`` cancels a move (``MoveCancelled`` frees its reservation); ``DefragEnded`` closes the
campaign when no move is left open.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from events.base import Event, Intent
from events.bounds import Id, Name, Text, Token
from events.values import Partition, Resources

MAX_DEFRAG_MOVES = 1000
"""The largest budget of moves a campaign accepts (bounds its decision and its events)."""

MAX_DEFRAG_DURATION_S = 24 * 3600
"""The longest a campaign may run (seconds); its reservations expire with it at the latest."""

DEFAULT_DEFRAG_DURATION_S = 600
"""A campaign's ``max_duration_s`` when none is given (TensorFusion's defrag has no default; 10 minutes)."""

MoveCancelCode = Literal["eviction_refused", "source_gone", "expired", "deadline", "cancelled", "node_gone"]
"""Why a move was cancelled: the Eviction API refused (a PodDisruptionBudget, 429); the source
allocation ended without its pod being evicted for the move; the reservation expired; the campaign's
deadline passed; an operator cancelled the campaign; the target node left or is no longer Ready."""

DefragEndCode = Literal["done", "deadline", "cancelled"]
"""Why a campaign ended: every move completed or was cancelled; its deadline passed; an operator cancelled it."""

MoveCount = Annotated[int, msgspec.Meta(ge=1, le=MAX_DEFRAG_MOVES)]
DurationS = Annotated[int, msgspec.Meta(ge=1, le=MAX_DEFRAG_DURATION_S)]
SharePct = Annotated[float, msgspec.Meta(ge=0.0, le=100.0)]
TflopsCap = Annotated[int, msgspec.Meta(ge=1, le=10**15)]


class StartDefrag(Intent, frozen=True, tag="start_defrag"):
    """Plan a consolidation of ``pool`` now and execute it: at most ``max_moves`` moves, at most
    ``max_share_of_namespace_pct`` percent of each namespace's allocations in the pool, at most
    ``max_milli_tflops`` milli-TFLOPS in motion (None: unbounded), ending ``max_duration_s`` seconds
    after it starts (TensorFusion ``maxDuration``). ``trigger`` says who asked (``cli``, ``api``,
    ``schedule``). The campaign's id is this intent's id. Refused while a campaign runs in the pool."""

    pool: Name
    max_moves: MoveCount = 10
    max_share_of_namespace_pct: SharePct = 100.0
    max_milli_tflops: TflopsCap | None = None
    max_duration_s: DurationS = DEFAULT_DEFRAG_DURATION_S
    trigger: Token = ""


class CancelDefrag(Intent, frozen=True, tag="cancel_defrag"):
    """Stop the campaign running in ``pool``: every open move is cancelled (its reservation freed);
    moves already completed stay. ``reason``: in words, for the log."""

    pool: Name
    reason: Text = ""


class CancelMove(Intent, frozen=True, tag="cancel_move"):
    """Cancel one open move of campaign ``campaign_id`` (the binder's report of a refused eviction:
    ``code`` ``eviction_refused``, or the source pod gone before its eviction: ``source_gone``)."""

    campaign_id: Id
    allocation_id: Id
    pool: Name = ""
    code: Token = "eviction_refused"
    reason: Text = ""


class DefragStarted(Event, frozen=True, tag="defrag_started"):
    """Campaign ``campaign_id`` started on ``pool`` with this budget, ending at ``deadline`` at the
    latest; it plans ``moves`` moves emptying ``nodes`` (in plan order). One MoveReserved per move
    follows in the same decision."""

    campaign_id: str
    pool: str
    deadline: datetime
    max_moves: int
    max_share_of_namespace_pct: float = 100.0
    max_milli_tflops: int | None = None
    moves: int = 0
    nodes: tuple[str, ...] = ()
    trigger: str = ""
    stopped: str = ""


class MoveReserved(Event, frozen=True, tag="move_reserved"):
    """Allocation ``allocation_id`` (pod ``namespace/pod`` of ``workload``) will move from
    ``source_node``/``source_gpus`` to ``target_node``/``target_gpus``: ``charges[i]`` (and
    ``partitions[i]``, partitioned requests only) are held on ``target_gpus[i]``, with ``cpu_milli``
    and ``memory_bytes`` on the target node, until the move completes, is cancelled, or
    ``expires_at``."""

    campaign_id: str
    pool: str
    allocation_id: str
    namespace: str
    pod: str
    workload: str
    source_node: str
    source_gpus: tuple[str, ...]
    target_node: str
    target_gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    expires_at: datetime
    partitions: tuple[Partition, ...] = ()
    cpu_milli: int = 0
    memory_bytes: int = 0


class MoveCompleted(Event, frozen=True, tag="move_completed"):
    """The move of ``allocation_id`` completed: request ``replacement_id`` (pod ``replacement_pod``,
    the same workload) was granted the reserved GPUs; its AllocationGranted follows in the same
    decision. Frees the reservation (the grant takes the same capacity)."""

    campaign_id: str
    pool: str
    allocation_id: str
    replacement_id: str
    replacement_pod: str
    node: str
    gpus: tuple[str, ...]


class MoveCancelled(Event, frozen=True, tag="move_cancelled"):
    """The move of ``allocation_id`` was cancelled (``code``: :data:`MoveCancelCode`); its
    reservation on ``node`` is freed."""

    campaign_id: str
    pool: str
    allocation_id: str
    node: str
    code: str
    reason: str = ""


class DefragEnded(Event, frozen=True, tag="defrag_ended"):
    """Campaign ``campaign_id`` on ``pool`` ended (``code``: :data:`DefragEndCode`) with
    ``completed`` moves done and ``cancelled`` moves cancelled; it holds nothing any more."""

    campaign_id: str
    pool: str
    code: str
    completed: int = 0
    cancelled: int = 0
    reason: str = ""
