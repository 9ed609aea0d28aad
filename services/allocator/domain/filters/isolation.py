"""GPUIsolationModeFilter and SharedWholeGPUFilter (TensorFusion gpuallocator filters 2 and 2b).

GPUIsolationModeFilter is the Static isolation policy (TensorFusion's default): the GPU's
discovered ``isolation_mode`` is its fixed mode. Under a pool's Dynamic policy the discovered
mode is ignored and filters/isolation_policy.py decides (capabilities apply under both).
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNRESOLVABLE, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need


class GPUIsolationModeFilter:
    """A non-shared request needs a GPU whose runtime isolation mode is unset or equal to it."""

    name: ClassVar[str] = "GPUIsolationModeFilter"
    capacity_bound: ClassVar[bool] = False
    rejected: ClassVar[Status] = Status(UNRESOLVABLE, "GPU runs another isolation mode")

    def enabled(self, need: Need) -> bool:
        """On when the request names an isolation mode."""
        return bool(need.isolation)

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """Shared requests accept any mode; others need mode "" or the requested one (static policy only)."""
        mode = gpu.spec.isolation_mode
        if need.shared or mode in ("", need.isolation) or ctx.config.isolation_policy == "dynamic":
            return OK
        return self.rejected


class SharedWholeGPUFilter:
    """A ``shared`` request takes a whole GPU exclusively: only completely idle GPUs pass
    (capacity-bound: a node with no idle GPU loses every GPU that reaches this filter)."""

    name: ClassVar[str] = "SharedWholeGPUFilter"
    capacity_bound: ClassVar[bool] = True
    no_capacity: ClassVar[Status] = Status(UNRESOLVABLE, "GPU reports no capacity")
    busy: ClassVar[Status] = Status(UNSCHEDULABLE, "GPU is not idle")

    def enabled(self, need: Need) -> bool:
        """On for isolation ``shared``."""
        return need.shared

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """No allocation holds any share of the GPU, nor does a defrag reservation (its hold is in the
        used figures only: domain/defrag_fold.py), and it has a capacity (static: capacity only)."""
        cap = gpu.spec.capacity
        has_capacity = cap.milli_tflops > 0 and cap.vram_bytes > 0
        if not has_capacity:
            return self.no_capacity
        held = gpu.charges or gpu.used_milli_tflops or gpu.used_vram_bytes
        return OK if ctx.static or not held else self.busy
