"""Isolation capabilities and the Dynamic isolation policy (TensorFusion gpuallocator filter 2).

TensorFusion internal/gpuallocator/filter/gpu_isolation_mode_filter.go and
docs/dynamic-gpu-isolation-design.md, as three GPU filters so ``explain`` names each cause:

- :class:`IsolationCapabilityFilter`: a GPU whose ``isolation_capabilities`` are known (non-empty)
  and lack the requested mode is never a candidate. Empty means unknown: every mode allowed (as
  TensorFusion without its ``virtualization-capabilities`` annotation).
- :class:`IsolationConflictFilter` (pool ``isolation_policy: dynamic``): a GPU whose live
  allocations hold more than one isolation mode (found on replay, e.g. after a pool switched
  from static to dynamic) is failed closed: no new allocation there until it drains.
- :class:`DynamicIsolationFilter` (``dynamic``): the first allocation on an idle GPU locks the
  GPU to its mode; later ones must match; the lock is derived from the GPU's live allocations
  (:func:`lock_of`), so it clears when the GPU is idle again and replays exactly. Partitioned
  requests are refused under ``dynamic`` (TensorFusion: "dynamic policy does not support
  partitioned allocation").

The static pass ("could it ever fit?") ignores locks and conflicts: both clear as allocations end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from services.allocator.domain.framework import OK, UNRESOLVABLE, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import AllocationState, GpuState
from services.allocator.domain.need import Need

DYNAMIC = "dynamic"
CONFLICT = "conflict"
"""What :func:`lock_of` answers for a GPU whose allocations hold several modes."""


def lock_of(gpu: GpuState, allocations: Mapping[str, AllocationState]) -> str:
    """The GPU's Dynamic lock: "" when idle, the one isolation mode of its live allocations, or
    :data:`CONFLICT` when they hold several (an allocation missing from ``allocations`` counts as
    a mode of its own, so an incomplete view fails closed)."""
    modes = set()
    for aid in gpu.charges:
        allocation = allocations.get(aid)
        modes.add(allocation.spec.isolation if allocation is not None else "?")
    if not modes:
        return ""
    return modes.pop() if len(modes) == 1 else CONFLICT


class IsolationCapabilityFilter:
    """The GPU's known isolation capabilities must include the requested mode."""

    name: ClassVar[str] = "IsolationCapabilityFilter"
    capacity_bound: ClassVar[bool] = False

    def enabled(self, need: Need) -> bool:
        """On when the request names an isolation mode."""
        return bool(need.isolation)

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """OK when the capabilities are unknown (empty) or list ``need.isolation``."""
        caps = gpu.spec.isolation_capabilities
        if not caps or need.isolation in caps:
            return OK
        return Status(UNRESOLVABLE, f"GPU cannot run isolation {need.isolation} (capabilities: {', '.join(caps)})")


class IsolationConflictFilter:
    """Dynamic policy: a GPU holding allocations of several isolation modes is failed closed."""

    name: ClassVar[str] = "IsolationConflictFilter"
    capacity_bound: ClassVar[bool] = False
    conflict: ClassVar[Status] = Status(
        UNSCHEDULABLE, "GPU holds allocations of conflicting isolation modes: failed closed until they end")

    def enabled(self, need: Need) -> bool:
        """On when the request names an isolation mode."""
        return bool(need.isolation)

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """OK unless the pool is dynamic and the GPU's live allocations disagree on the mode."""
        if ctx.config.isolation_policy != DYNAMIC or ctx.static or len(gpu.charges) < 2:
            return OK
        return self.conflict if lock_of(gpu, ctx.allocations) == CONFLICT else OK


class DynamicIsolationFilter:
    """Dynamic policy: an idle GPU takes any mode; a busy one only the mode it is locked to."""

    name: ClassVar[str] = "DynamicIsolationFilter"
    capacity_bound: ClassVar[bool] = False
    partitioned: ClassVar[Status] = Status(UNRESOLVABLE, "dynamic isolation policy does not support partitioned")

    def enabled(self, need: Need) -> bool:
        """On when the request names an isolation mode."""
        return bool(need.isolation)

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """OK when the pool is static, the GPU is idle, or its lock equals ``need.isolation``."""
        if ctx.config.isolation_policy != DYNAMIC:
            return OK
        if need.isolation == "partitioned":
            return self.partitioned
        if ctx.static or not gpu.charges:
            return OK
        lock = lock_of(gpu, ctx.allocations)
        if lock == need.isolation:
            return OK
        return Status(UNSCHEDULABLE, f"GPU is locked to isolation {lock}, not {need.isolation}")
