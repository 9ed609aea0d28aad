"""ResourceFilter (TensorFusion gpuallocator filter 4): enough TFLOPS and VRAM available on the GPU.

The TFLOPS need of a percentage request is converted with the GPU's own capacity. Equality
passes. A static pass compares with capacity instead of available.
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNRESOLVABLE, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need


class ResourceFilter:
    """available.tflops ≥ need and available.vram ≥ need (milli-TFLOPS, bytes). Capacity-bound: a
    node whose largest free amounts cannot hold one share loses every GPU that reaches it."""

    name: ClassVar[str] = "ResourceFilter"
    capacity_bound: ClassVar[bool] = True
    too_small: ClassVar[Status] = Status(UNRESOLVABLE, "GPU capacity below the request")
    too_full: ClassVar[Status] = Status(UNSCHEDULABLE, "GPU has too little free TFLOPS or VRAM")

    def enabled(self, need: Need) -> bool:
        """Always on."""
        return True

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """Compare per-GPU need with available (or capacity in a static pass)."""
        cap = gpu.spec.capacity
        tflops = need.tflops_on(cap.milli_tflops) if need.percent else need.tflops
        if ctx.static:
            return OK if cap.milli_tflops >= tflops and cap.vram_bytes >= need.vram else self.too_small
        if cap.milli_tflops - gpu.used_milli_tflops >= tflops and cap.vram_bytes - gpu.used_vram_bytes >= need.vram:
            return OK
        return self.too_full
