"""PhaseFilter and GPUIndexFilter (TensorFusion gpuallocator filters 0 and 1)."""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import Context
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need

RUNNING = "Running"
ELIGIBLE_USERS = frozenset({"", "tensor-fusion"})


class PhaseFilter:
    """TensorFusion PhaseFilter: only Running GPUs not claimed by another device plugin.

    A static pass ignores the phase (it can change) but not ``used_by``.
    """

    name: ClassVar[str] = "PhaseFilter"

    def enabled(self, need: Need) -> bool:
        """Always on."""
        return True

    def admits(self, gpu: GpuState, need: Need, ctx: Context) -> bool:
        """``used_by`` ∈ {"", "tensor-fusion"} and phase Running."""
        return gpu.spec.used_by in ELIGIBLE_USERS and (ctx.static or gpu.phase == RUNNING)


class GPUIndexFilter:
    """TensorFusion GPUIndexFilter: the GPU's index must be in the request's allow-list."""

    name: ClassVar[str] = "GPUIndexFilter"

    def enabled(self, need: Need) -> bool:
        """On when the request lists GPU indices."""
        return need.indices is not None

    def admits(self, gpu: GpuState, need: Need, ctx: Context) -> bool:
        """The GPU reports an index and it is allowed."""
        return need.indices is not None and gpu.spec.index in need.indices
