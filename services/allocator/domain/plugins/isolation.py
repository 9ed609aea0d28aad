"""GPUIsolationModeFilter and SharedWholeGPUFilter (TensorFusion gpuallocator filters 2 and 2b).

Static isolation policy only (TensorFusion's default); the Dynamic policy and partitioned
(MIG) templates are not implemented (docs/compatibility.md).
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import Context
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need


class GPUIsolationModeFilter:
    """A non-shared request needs a GPU whose runtime isolation mode is unset or equal to it."""

    name: ClassVar[str] = "GPUIsolationModeFilter"

    def enabled(self, need: Need) -> bool:
        """On when the request names an isolation mode."""
        return bool(need.isolation)

    def admits(self, gpu: GpuState, need: Need, ctx: Context) -> bool:
        """Shared requests accept any mode; others need mode "" or the requested one."""
        mode = gpu.spec.isolation_mode
        return need.shared or mode in ("", need.isolation)


class SharedWholeGPUFilter:
    """A ``shared`` request takes a whole GPU exclusively: only completely idle GPUs pass."""

    name: ClassVar[str] = "SharedWholeGPUFilter"

    def enabled(self, need: Need) -> bool:
        """On for isolation ``shared``."""
        return need.shared

    def admits(self, gpu: GpuState, need: Need, ctx: Context) -> bool:
        """No allocation holds any share of the GPU and it has a capacity (static: capacity only)."""
        cap = gpu.spec.capacity
        has_capacity = cap.milli_tflops > 0 and cap.vram_bytes > 0
        return has_capacity and (ctx.static or not gpu.charges)
