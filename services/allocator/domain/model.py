"""Projected cluster state records: GPUs, nodes, allocations, quotas (mutable, owned by ``evolve``).

These are the rows of the projection. Only :mod:`services.allocator.domain.evolve` mutates them;
``decide`` and the plugins read them. Available capacity and quota usage are derived from live
allocations (``used_*`` are kept equal to the sum of live charges), so available can never
exceed capacity and a release restores exactly what the grant took.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

import msgspec

from events.values import AllocationSpec, GpuSpec, Partition, PoolConfig, QuotaSpec, Resources, ShareSpec
from services.allocator.domain.campaign_records import Campaign
from services.allocator.domain.taskclass import TaskClass

GRANTED = "granted"
QUEUED = "queued"

MISSING = "Unknown"
"""The phase of a GPU its node's last report left out (domain/inventory.py): it stays, with its
allocations, but no longer counts in capacity or available (:func:`capacity_totals`)."""


class Totals(NamedTuple):
    """Capacity, charges and available of a set of GPUs (milli-TFLOPS, bytes)."""

    capacity: Resources
    allocated: Resources
    available: Resources
    missing: int


def capacity_totals(gpus: Iterable[GpuState]) -> Totals:
    """The totals of ``gpus`` as the API, ``status``, the dashboard and the pool gauges show them.
    A GPU discovery no longer reports (phase :data:`MISSING`) counts in neither capacity nor
    available (TensorFusion internal/gpuallocator/node_capacity.go sums only the GPUs its node
    still has); the charges of allocations still on it stay in ``allocated`` until they are
    released. Available is per GPU floored at 0 (capacity may shrink under allocations)."""
    cap_t = cap_v = used_t = used_v = free_t = free_v = missing = 0
    for gpu in gpus:
        used_t += gpu.used_milli_tflops
        used_v += gpu.used_vram_bytes
        if gpu.phase == MISSING:
            missing += 1
            continue
        cap_t += gpu.spec.capacity.milli_tflops
        cap_v += gpu.spec.capacity.vram_bytes
        free_t += gpu.available_milli_tflops
        free_v += gpu.available_vram_bytes
    return Totals(capacity=Resources(milli_tflops=cap_t, vram_bytes=cap_v),
                  allocated=Resources(milli_tflops=used_t, vram_bytes=used_v),
                  available=Resources(milli_tflops=free_t, vram_bytes=free_v), missing=missing)


def device_order(spec: GpuSpec) -> tuple[int, str]:
    """The tie-break between GPUs of equal score: the device index discovery reports (NVML order),
    then the name. Without an index, the number the name ends in stands for it (``gpu-2`` before
    ``gpu-10``, never the string order ``gpu-0, gpu-1, gpu-10``); a name without one counts as 0.
    Every strategy and the ReferenceScheduler tie by this key (docs/allocation.md)."""
    if spec.index is not None:
        return spec.index, spec.name
    digits = len(spec.name) - len(spec.name.rstrip("0123456789"))
    return (int(spec.name[-digits:]) if digits else 0), spec.name


class GpuState(msgspec.Struct, kw_only=True):
    """One GPU: its reported spec, its node and pool, and the charges of live allocations on it.

    ``used_milli_tflops``/``used_vram_bytes`` = Σ ``charges`` (milli-TFLOPS, bytes).
    ``partitions``: allocation id -> the hardware partition it holds here (partitioned
    allocations only; each also has its template-sized entry in ``charges``).
    """

    spec: GpuSpec
    node: str
    pool: str
    phase: str
    used_milli_tflops: int = 0
    used_vram_bytes: int = 0
    charges: dict[str, Resources] = {}
    partitions: dict[str, Partition] = {}

    @property
    def name(self) -> str:
        """The GPU's key (``GpuSpec.name``)."""
        return self.spec.name

    @property
    def capacity(self) -> Resources:
        """Physical capacity (milli-TFLOPS, bytes)."""
        return self.spec.capacity

    @property
    def available_milli_tflops(self) -> int:
        """Capacity minus live charges, floored at 0 (capacity may shrink under allocations)."""
        return max(0, self.spec.capacity.milli_tflops - self.used_milli_tflops)

    @property
    def available_vram_bytes(self) -> int:
        """Capacity minus live charges in bytes, floored at 0."""
        return max(0, self.spec.capacity.vram_bytes - self.used_vram_bytes)

    @property
    def available(self) -> Resources:
        """Available resources as a value (milli-TFLOPS, bytes)."""
        return Resources(milli_tflops=self.available_milli_tflops, vram_bytes=self.available_vram_bytes)

    @property
    def overcommitted(self) -> bool:
        """True when live charges exceed capacity (capacity shrank under allocations)."""
        cap = self.spec.capacity
        return self.used_milli_tflops > cap.milli_tflops or self.used_vram_bytes > cap.vram_bytes

    @property
    def idle(self) -> bool:
        """True when no allocation holds any share of this GPU."""
        return not self.charges


class NodeState(msgspec.Struct, kw_only=True):
    """A node: labels, allocatable CPU (millicores) and memory (bytes), its GPUs, liveness.

    ``workers``: the ids of the allocations granted on it. ``idle_since``: when it last became
    idle (no granted allocation: registered with none, or its last one released or preempted),
    the event's time; None while an allocation is granted on it (TensorFusion
    internal/gpuallocator/gpuallocator.go ``ListNonUsingNodes``: nodes whose worker set is empty).
    """

    name: str
    pool: str
    gpus: list[str] = []
    labels: dict[str, str] = {}
    cpu_milli: int = 0
    memory_bytes: int = 0
    used_cpu_milli: int = 0
    used_memory_bytes: int = 0
    schedulable: bool = True
    phase: str = "Ready"
    heartbeat_ttl_s: float = 0.0
    last_seen: datetime | None = None
    source: str = ""
    workers: list[str] = []
    idle_since: datetime | None = None


class QuotaUsage(msgspec.Struct, kw_only=True):
    """A namespace's usage: Σ request×count, Σ limit×count (milli-TFLOPS, bytes), worker count."""

    requests_milli_tflops: int = 0
    requests_vram_bytes: int = 0
    limits_milli_tflops: int = 0
    limits_vram_bytes: int = 0
    workers: int = 0


class AllocationState(msgspec.Struct, kw_only=True):
    """A live allocation: granted (holding ``charges`` on ``gpus`` of ``node``) or queued.

    ``queue_seq`` orders queued requests FIFO within a QoS class; ``reason``/``code`` say why
    a queued request waits; ``usage`` is what a granted allocation adds to its namespace's usage;
    ``partitions[i]`` is the partition held on ``gpus[i]`` (isolation ``partitioned`` only);
    ``share``/``borrowed``: the leaf share its grant charged and whether it was borrowed then
    (AllocationGranted; "" and False in a pool without shares).
    """

    spec: AllocationSpec
    status: str
    requested_at: datetime
    node: str = ""
    gpus: list[str] = []
    charges: list[Resources] = []
    granted_at: datetime | None = None
    queue_seq: int = 0
    reason: str = ""
    code: str = ""
    usage: QuotaUsage | None = None
    partitions: list[Partition] = []
    share: str = ""
    borrowed: bool = False


class ShareUsage(msgspec.Struct, kw_only=True):
    """A share's usage in one pool: Σ request milli-TFLOPS × GPUs (percent converted with each GPU's
    capacity, as quota usage), Σ request VRAM bytes × GPUs, and the GPUs held, over the granted
    allocations of its namespaces there (a parent's: its children's sum). docs/allocation.md."""

    milli_tflops: int = 0
    vram_bytes: int = 0
    gpus: int = 0

    def is_zero(self) -> bool:
        """True when nothing is used."""
        return not (self.milli_tflops or self.vram_bytes or self.gpus)


class RequestShape(msgspec.Struct, frozen=True, array_like=True):
    """What one arriving request asked per GPU: CPU millicores, milli-TFLOPS or milli-percent,
    GPU count, allowed models, VRAM bytes and whether it takes whole GPUs (``shared`` isolation):
    the inputs of a pool's learned target workload (domain/target.py ``pod_key``). The last two
    were added later; shapes from older snapshots decode with their defaults."""

    cpu_milli: int
    milli_tflops: int
    milli_percent: int
    count: int
    models: tuple[str, ...] = ()
    vram_bytes: int = 0
    whole: bool = False


class RecentRequests(msgspec.Struct, kw_only=True):
    """A pool's recent request shapes, oldest first (bounded), how many requests ever arrived, and
    the target workload learned from them (None: the built-in prior; domain/target.py)."""

    arrivals: int = 0
    shapes: list[RequestShape] = []
    mix: tuple[TaskClass, ...] | None = None


class DecayedUsage(msgspec.Struct, kw_only=True, gc=False):
    """A share's exponentially decayed average usage in a pool: milli-TFLOPS, VRAM bytes, GPUs
    (floats; domain/fairshare.py ``advance``)."""

    milli_tflops: float = 0.0
    vram_bytes: float = 0.0
    gpus: float = 0.0


class PoolDecay(msgspec.Struct, kw_only=True):
    """A pool's decayed share usage as of ``at`` (the last event that changed usage there): share ->
    DecayedUsage. Kept only for pools with shares and ``fair_share_half_life_s`` > 0."""

    at: datetime
    shares: dict[str, DecayedUsage] = {}


class StateSnapshot(msgspec.Struct, kw_only=True):
    """The serialisable whole of :class:`ClusterState` (what ``snapshots`` stores), minus indexes.

    ``version``: the projection rules that wrote it (``state.PROJECTION_VERSION``; 0 for snapshots
    written before the field existed). ``campaigns``: pool -> its running or last defrag campaign.
    ``checked_at``: the time of the last HeartbeatsChecked (None before the first)."""

    version: int = 0
    position: int = 0
    gpus: dict[str, GpuState] = {}
    nodes: dict[str, NodeState] = {}
    allocations: dict[str, AllocationState] = {}
    quotas: dict[str, QuotaSpec] = {}
    usage: dict[str, QuotaUsage] = {}
    pools: dict[str, PoolConfig] = {}
    queue_seq: int = 0
    recent: dict[str, RecentRequests] = {}
    campaigns: dict[str, Campaign] = {}
    shares: dict[str, ShareSpec] = {}
    reclaims: dict[str, list[datetime]] = {}
    decayed: dict[str, PoolDecay] = {}
    checked_at: datetime | None = None
