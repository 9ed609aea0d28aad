"""TensorFusion's placement strategies: how nodes are ranked and which GPUs of the chosen node are taken.

TensorFusion gpuallocator strategies (strategy_*.go), scores 0-100 via ``units.normalize``:
- CompactFirst: node and GPU score = normalize(used% VRAM, used% TFLOPS): fullest first.
- LowLoadFirst: node and GPU score = normalize(available%): emptiest first.
- NodeCompactGPULowLoad (default): fullest node first, emptiest GPUs within it.
A node's score is the floor of the mean of its GPUs' node-level scores (TensorFusion's
scheduler-plugin Score; its direct ``Select`` path sums instead, see docs/compatibility.md).
Ties break by node name, then GPU index (``model.device_order``: ``gpu-2`` before ``gpu-10``), so
replays reproduce every decision.
All three are :class:`~services.allocator.domain.strategies.base.IndexedStrategy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, device_order
from services.allocator.domain.need import Need
from services.allocator.domain.units import available_percent, normalize


def used_score(gpu: GpuState, config: PoolConfig) -> int:
    """normalize(used% VRAM, used% TFLOPS) with the pool weights (used% = 100 − available%)."""
    cap = gpu.spec.capacity
    return normalize(
        100 - available_percent(gpu.available_vram_bytes, cap.vram_bytes),
        100 - available_percent(gpu.available_milli_tflops, cap.milli_tflops),
        vram_weight=config.vram_weight,
        tflops_weight=config.tflops_weight,
    )


def available_score(gpu: GpuState, config: PoolConfig) -> int:
    """normalize(available% VRAM, available% TFLOPS) with the pool weights."""
    cap = gpu.spec.capacity
    return normalize(
        available_percent(gpu.available_vram_bytes, cap.vram_bytes),
        available_percent(gpu.available_milli_tflops, cap.milli_tflops),
        vram_weight=config.vram_weight,
        tflops_weight=config.tflops_weight,
    )


def _top(candidates: Sequence[GpuState], count: int, score: object, config: PoolConfig) -> list[GpuState]:
    scored = sorted(candidates, key=lambda g: (-score(g, config), device_order(g.spec)))  # type: ignore[operator]
    return scored[:count]


class CompactFirst:
    """TensorFusion CompactFirst: fullest node, then fullest GPUs."""

    name: ClassVar[str] = "compact-first"

    def node_gpu_score(self, gpu: GpuState, config: PoolConfig) -> int:
        """Used-based score."""
        return used_score(gpu, config)

    def pick(self, candidates: Sequence[GpuState], need: Need, config: PoolConfig) -> list[GpuState]:
        """Fullest GPUs first."""
        return _top(candidates, need.count, used_score, config)


class LowLoadFirst:
    """TensorFusion LowLoadFirst: emptiest node, then emptiest GPUs."""

    name: ClassVar[str] = "low-load-first"

    def node_gpu_score(self, gpu: GpuState, config: PoolConfig) -> int:
        """Available-based score."""
        return available_score(gpu, config)

    def pick(self, candidates: Sequence[GpuState], need: Need, config: PoolConfig) -> list[GpuState]:
        """Emptiest GPUs first."""
        return _top(candidates, need.count, available_score, config)


class NodeCompactGPULowLoad:
    """TensorFusion NodeCompactGPULowLoad (the default): fullest node, emptiest GPUs on it."""

    name: ClassVar[str] = "node-compact-gpu-low-load"

    def node_gpu_score(self, gpu: GpuState, config: PoolConfig) -> int:
        """Used-based score."""
        return used_score(gpu, config)

    def pick(self, candidates: Sequence[GpuState], need: Need, config: PoolConfig) -> list[GpuState]:
        """Emptiest GPUs first."""
        return _top(candidates, need.count, available_score, config)
