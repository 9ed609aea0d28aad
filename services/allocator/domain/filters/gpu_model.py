"""GPUModelFilter and GPUVendorFilter (TensorFusion gpuallocator filters 5 and 6).

gpuledger takes an allow-list of models (TensorFusion: one exact model string).
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNRESOLVABLE, Context, Status
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need


class GPUModelFilter:
    """The GPU's model must be one of the request's allowed models (exact match)."""

    name: ClassVar[str] = "GPUModelFilter"
    capacity_bound: ClassVar[bool] = False
    rejected: ClassVar[Status] = Status(UNRESOLVABLE, "GPU model not allowed")

    def enabled(self, need: Need) -> bool:
        """On when the request restricts models."""
        return need.models is not None

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """Exact string match against the allow-list."""
        return OK if need.models is not None and gpu.spec.model in need.models else self.rejected


class GPUVendorFilter:
    """The GPU's vendor must equal the requested vendor (exact match)."""

    name: ClassVar[str] = "GPUVendorFilter"
    capacity_bound: ClassVar[bool] = False
    rejected: ClassVar[Status] = Status(UNRESOLVABLE, "GPU vendor differs")

    def enabled(self, need: Need) -> bool:
        """On when the request names a vendor."""
        return bool(need.vendor)

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """Exact string match."""
        return OK if gpu.spec.vendor == need.vendor else self.rejected
