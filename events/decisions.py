"""Events: the facts the allocator appends to the log, one or more per decided intent.

Past-tense, immutable, tagged msgspec Structs published on ``gpuledger.event.<tag>`` after
commit (msg id = log position). ``evolve`` folds them into cluster state; they carry every
number the fold needs (for example the exact per-GPU ``charges``), so a replay never has to
recompute a decision.
"""

from __future__ import annotations

from typing import Union, get_args

from events.base import Event
from events.defrag import DefragEnded as DefragEnded
from events.defrag import DefragStarted as DefragStarted
from events.defrag import MoveCancelled as MoveCancelled
from events.defrag import MoveCompleted as MoveCompleted
from events.defrag import MoveReserved as MoveReserved
from events.gangs import GangDegraded as GangDegraded
from events.gangs import GangPlaced as GangPlaced
from events.gangs import GangTimedOut as GangTimedOut
from events.values import (
    AllocationSpec,
    FilterCount,
    GpuSpec,
    Partition,
    PoolConfig,
    QuotaSpec,
    Resources,
    ShareSpec,
)


class AllocationGranted(Event, frozen=True, tag="allocation_granted"):
    """GPUs ``gpus`` on ``node`` were given to ``spec``; ``charges[i]`` was taken from ``gpus[i]``.

    ``from_queue`` is true when the request had been queued and was granted by a later decision.
    ``preempted`` lists the allocation ids this grant preempted (their AllocationPreempted events
    come first in the same decision); the binder lifts the pod's gate once their pods are gone.
    ``partitions[i]`` is the partition taken on ``gpus[i]`` (isolation ``partitioned`` only, else
    empty): template and slots are recorded so a replay never chooses them again.
    ``share`` is the leaf share charged ("" when the pool has no shares, or the namespace is in
    none); ``borrowed`` is true when, with this grant, the share's usage in the pool exceeds its
    guarantee in some resource (docs/allocation.md "Fair share"; Kueue: admitted while borrowing).
    """

    spec: AllocationSpec
    node: str
    gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    from_queue: bool = False
    preempted: tuple[str, ...] = ()
    partitions: tuple[Partition, ...] = ()
    share: str = ""
    borrowed: bool = False


class AllocationPreempted(Event, frozen=True, tag="allocation_preempted"):
    """A granted allocation lost its GPUs to a higher-priority request (``preemptor``), or, with
    ``reclaim``, a borrowed allocation was taken back for a share below its guarantee.

    Folds like a release (its charges go back exactly); the AllocationGranted of the preemptor
    follows in the same decision. ``priority``/``preemptor_priority`` are the effective
    priorities that allowed it (a reclaim ignores them); ``reason`` says why in words.
    """

    allocation_id: str
    namespace: str
    pod: str
    pool: str
    node: str
    gpus: tuple[str, ...]
    preemptor: str
    preemptor_namespace: str
    preemptor_pod: str
    priority: int
    preemptor_priority: int
    reason: str = ""
    reclaim: bool = False


class AllocationQueued(Event, frozen=True, tag="allocation_queued"):
    """The request cannot fit now but could later; it waits in priority order.

    ``code`` is ``capacity`` or ``quota``; ``filters`` says how many GPUs each filter removed;
    ``quota_dimension`` names the quota check that blocked (e.g. ``total.max.tflops.request``).
    """

    spec: AllocationSpec
    reason: str
    code: str
    filters: tuple[FilterCount, ...] = ()
    quota_dimension: str = ""


class AllocationRejected(Event, frozen=True, tag="allocation_rejected"):
    """The request can never fit (invalid, unknown pool, over a per-workload cap, too big)."""

    spec: AllocationSpec
    reason: str
    code: str
    filters: tuple[FilterCount, ...] = ()
    quota_dimension: str = ""
    field: str = ""


class AllocationReleased(Event, frozen=True, tag="allocation_released"):
    """A granted allocation gave its GPUs back, or a queued request left the queue."""

    allocation_id: str
    namespace: str
    pod: str
    pool: str
    node: str = ""
    gpus: tuple[str, ...] = ()
    was_queued: bool = False
    reason: str = ""


class AllocationResized(Event, frozen=True, tag="allocation_resized"):
    """Request/limit of a granted allocation changed; ``charges`` replace the old per-GPU charges."""

    allocation_id: str
    namespace: str
    pool: str
    request: Resources
    limit: Resources
    charges: tuple[Resources, ...]


class ResizeRejected(Event, frozen=True, tag="resize_rejected"):
    """A resize did not fit; ``max_request`` is the largest per-GPU request that would have."""

    allocation_id: str
    namespace: str
    pool: str
    request: Resources
    limit: Resources
    reason: str
    code: str
    max_request: Resources = Resources()
    quota_dimension: str = ""


class NodeRegistered(Event, frozen=True, tag="node_registered"):
    """A node was added, or its labels, allocatable or GPU set changed (full new description)."""

    node: str
    pool: str
    gpus: tuple[GpuSpec, ...] = ()
    labels: dict[str, str] = {}
    cpu_milli: int = 0
    memory_bytes: int = 0
    schedulable: bool = True
    heartbeat_ttl_s: float = 0.0
    source: str = ""


class NodeHeartbeat(Event, frozen=True, tag="node_heartbeat"):
    """A discovery source re-reported a node with nothing changed."""

    node: str
    pool: str


class NodeRemoved(Event, frozen=True, tag="node_removed"):
    """A node and its GPUs left the inventory (its live allocations were released first)."""

    node: str
    pool: str


class NodePhaseChanged(Event, frozen=True, tag="node_phase_changed"):
    """A node became ``Ready``, ``Unschedulable`` (cordoned/NotReady) or ``Lost`` (heartbeat TTL)."""

    node: str
    pool: str
    phase: str
    reason: str = ""


class GpuCapacityChanged(Event, frozen=True, tag="gpu_capacity_changed"):
    """A GPU's capacity changed; available is re-derived from live allocations."""

    gpu: str
    node: str
    pool: str
    capacity: Resources
    previous: Resources


class GpuPhaseChanged(Event, frozen=True, tag="gpu_phase_changed"):
    """A GPU's phase changed (a GPU missing from a report becomes ``Unknown``)."""

    gpu: str
    node: str
    pool: str
    phase: str
    previous: str
    reason: str = ""


class HeartbeatsChecked(Event, frozen=True, tag="heartbeats_checked"):
    """Outcome of CheckHeartbeats: the nodes found past their TTL (each also gets NodePhaseChanged Lost),
    and ``pools``: the pools with queued requests where an eviction protection, a reclaim minimum
    runtime or a reclaim rate window ended since the previous check (their queues are retried in the
    same decision; docs/allocation.md "Preemption"). Events written before ``pools`` existed decode
    with none."""

    lost: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()


class QuotaSet(Event, frozen=True, tag="quota_set"):
    """A namespace quota was created or replaced; usage is always derived from live allocations."""

    namespace: str
    spec: QuotaSpec


class QuotaRemoved(Event, frozen=True, tag="quota_removed"):
    """A namespace quota was deleted."""

    namespace: str


class ShareSet(Event, frozen=True, tag="share_set"):
    """A share was created or replaced; its usage is always derived from live allocations."""

    name: str
    spec: ShareSpec


class ShareRemoved(Event, frozen=True, tag="share_removed"):
    """A share was deleted (it was no share's parent)."""

    name: str


class PoolConfigured(Event, frozen=True, tag="pool_configured"):
    """A pool's scheduling settings were set."""

    pool: str
    config: PoolConfig


class PoolRemoved(Event, frozen=True, tag="pool_removed"):
    """A pool's configuration was removed (it had no nodes and no live allocations)."""

    pool: str


class IntentRejected(Event, frozen=True, tag="intent_rejected"):
    """An intent was malformed or invalid; nothing else changed.

    ``intent_type`` is the tag when known, ``field``/``value`` name the offending input,
    ``subject`` the NATS subject it came on and ``raw`` (at most 4 KiB) its payload.
    """

    intent_id: str
    reason: str
    intent_type: str = ""
    field: str = ""
    value: str = ""
    subject: str = ""
    raw: str = ""


AnyEvent = Union[
    AllocationGranted,
    AllocationQueued,
    AllocationRejected,
    AllocationReleased,
    AllocationPreempted,
    AllocationResized,
    ResizeRejected,
    NodeRegistered,
    NodeHeartbeat,
    NodeRemoved,
    NodePhaseChanged,
    GpuCapacityChanged,
    GpuPhaseChanged,
    HeartbeatsChecked,
    QuotaSet,
    QuotaRemoved,
    PoolConfigured,
    PoolRemoved,
    IntentRejected,
    GangPlaced,
    GangTimedOut,
    GangDegraded,
    DefragStarted,
    MoveReserved,
    MoveCompleted,
    MoveCancelled,
    DefragEnded,
    ShareSet,
    ShareRemoved,
]
"""Every event type; the tagged union the codec decodes."""

EVENT_TYPES: tuple[type[Event], ...] = get_args(AnyEvent)
