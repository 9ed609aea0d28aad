"""Intents: what producers (admission, discovery, autoscaler, operators) ask the allocator to do.

Each is an immutable, tagged msgspec Struct published on ``gpuledger.intent.<tag>`` with
``Nats-Msg-Id`` = ``intent_id``. The allocator decides each intent exactly once.
"""

from __future__ import annotations

from typing import Annotated, Union, get_args

import msgspec

from events.base import Intent
from events.bounds import (
    MAX_GPUS_PER_NODE,
    CpuMilli,
    HeartbeatTtl,
    Id,
    Labels,
    MemoryBytes,
    Name,
    Text,
    Token,
)
from events.defrag import CancelDefrag as CancelDefrag
from events.defrag import CancelMove as CancelMove
from events.defrag import StartDefrag as StartDefrag
from events.values import AllocationSpec, GpuSpec, PoolConfig, QuotaSpec, Resources, ShareSpec


class RequestAllocation(Intent, frozen=True, tag="request_allocation"):
    """Allocate ``spec.gpu_count`` GPUs on one node for ``spec.allocation_id`` (a pod)."""

    spec: AllocationSpec


class ReleaseAllocation(Intent, frozen=True, tag="release_allocation"):
    """Release a granted allocation, or drop a queued request (pod deleted or finished)."""

    allocation_id: Id
    namespace: Token = ""
    pod: Name = ""
    pool: Name = ""
    reason: Text = ""


class ResizeAllocation(Intent, frozen=True, tag="resize_allocation"):
    """Set new per-GPU request and limit (TensorFusion AdjustAllocation semantics)."""

    allocation_id: Id
    request: Resources
    limit: Resources
    pool: Name = ""


class RegisterNode(Intent, frozen=True, tag="register_node"):
    """Upsert a node and its GPUs; also the heartbeat of a discovery source.

    ``cpu_milli``/``memory_bytes`` are the node's allocatable (0: not reported).
    ``heartbeat_ttl_s`` 0 means the node never expires; otherwise it is marked Lost when no
    report arrives within that many seconds.
    """

    node: Name
    pool: Name
    gpus: Annotated[tuple[GpuSpec, ...], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)] = ()
    labels: Labels = {}
    cpu_milli: CpuMilli = 0
    memory_bytes: MemoryBytes = 0
    schedulable: bool = True
    heartbeat_ttl_s: HeartbeatTtl = 0.0
    source: Text = ""


class RemoveNode(Intent, frozen=True, tag="remove_node"):
    """Remove a node and its GPUs; live allocations on it are released."""

    node: Name
    pool: Name = ""


class SetQuota(Intent, frozen=True, tag="set_quota"):
    """Create or replace a namespace's GPUResourceQuota."""

    namespace: Token
    spec: QuotaSpec


class RemoveQuota(Intent, frozen=True, tag="remove_quota"):
    """Delete a namespace's quota: the namespace becomes unlimited."""

    namespace: Token


class SetShare(Intent, frozen=True, tag="set_share"):
    """Create or replace a share (a GPUShare): its namespaces, parent, weight and terms per pool."""

    name: Name
    spec: ShareSpec


class RemoveShare(Intent, frozen=True, tag="remove_share"):
    """Delete a share: its namespaces are in no share any more. Refused while it is a parent."""

    name: Name


class ConfigurePool(Intent, frozen=True, tag="configure_pool"):
    """Set a pool's placement strategy, score weights and max workers per node."""

    pool: Name
    config: PoolConfig


class RemovePool(Intent, frozen=True, tag="remove_pool"):
    """Remove a pool's configuration (what ConfigurePool set). Refused while the pool has nodes or
    live (granted or queued) allocations: the refusal names them."""

    pool: Name


class CheckHeartbeats(Intent, frozen=True, tag="check_heartbeats"):
    """Mark nodes whose heartbeat TTL ran out as Lost, and release the waiting members of gangs whose
    timeout ran out. The allocator publishes it on a timer, only when its projection shows an
    expired node or gang (``domain.expired_nodes``, ``domain.gang.expired``), so idle clusters log
    nothing."""


AnyIntent = Union[
    RequestAllocation,
    ReleaseAllocation,
    ResizeAllocation,
    RegisterNode,
    RemoveNode,
    SetQuota,
    RemoveQuota,
    ConfigurePool,
    RemovePool,
    CheckHeartbeats,
    StartDefrag,
    CancelDefrag,
    CancelMove,
    SetShare,
    RemoveShare,
]
"""Every intent type; the tagged union the codec decodes."""

INTENT_TYPES: tuple[type[Intent], ...] = get_args(AnyIntent)
