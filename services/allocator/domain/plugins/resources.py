"""ResourceFilter (TensorFusion gpuallocator filter 4): enough TFLOPS and VRAM available on the GPU.

The TFLOPS need of a percentage request is converted with the GPU's own capacity. Equality
passes. A static pass compares with capacity instead of available.
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import Context
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need


class ResourceFilter:
    """available.tflops ≥ need and available.vram ≥ need (milli-TFLOPS, bytes)."""

    name: ClassVar[str] = "ResourceFilter"

    def enabled(self, need: Need) -> bool:
        """Always on."""
        return True

    def admits(self, gpu: GpuState, need: Need, ctx: Context) -> bool:
        """Compare per-GPU need with available (or capacity in a static pass)."""
        cap = gpu.spec.capacity
        tflops = need.tflops_on(cap.milli_tflops) if need.percent else need.tflops
        if ctx.static:
            return cap.milli_tflops >= tflops and cap.vram_bytes >= need.vram
        return (
            cap.milli_tflops - gpu.used_milli_tflops >= tflops
            and cap.vram_bytes - gpu.used_vram_bytes >= need.vram
        )
