"""PhaseFilter and GPUIndexFilter (TensorFusion gpuallocator filters 0 and 1)."""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNRESOLVABLE, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need

RUNNING = "Running"
ELIGIBLE_USERS = frozenset({"", "tensor-fusion"})


class PhaseFilter:
    """TensorFusion PhaseFilter: only Running GPUs not claimed by another device plugin.

    A static pass ignores the phase (it can change) but not ``used_by``.
    """

    name: ClassVar[str] = "PhaseFilter"
    capacity_bound: ClassVar[bool] = False
    claimed: ClassVar[Status] = Status(UNRESOLVABLE, "GPU is used by another device plugin")
    not_running: ClassVar[Status] = Status(UNSCHEDULABLE, "GPU is not Running")

    def enabled(self, need: Need) -> bool:
        """Always on."""
        return True

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """``used_by`` ∈ {"", "tensor-fusion"} and phase Running."""
        if gpu.spec.used_by not in ELIGIBLE_USERS:
            return self.claimed
        return OK if ctx.static or gpu.phase == RUNNING else self.not_running


class GPUIndexFilter:
    """TensorFusion GPUIndexFilter: the GPU's index must be in the request's allow-list."""

    name: ClassVar[str] = "GPUIndexFilter"
    capacity_bound: ClassVar[bool] = False
    rejected: ClassVar[Status] = Status(UNRESOLVABLE, "GPU index not allowed")

    def enabled(self, need: Need) -> bool:
        """On when the request lists GPU indices."""
        return need.indices is not None

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """The GPU reports an index and it is allowed."""
        return OK if need.indices is not None and gpu.spec.index in need.indices else self.rejected
