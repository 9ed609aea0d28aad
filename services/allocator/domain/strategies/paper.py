"""Scan strategies of the ATC'23 "Beware of Fragmentation" paper: best-fit and random.

All of them are scan strategies (strategies.ScanStrategy) and work in milli-GPU: a GPU's free
milli is ``available TFLOPS × 1000 // capacity``; a request's per-GPU share is its compute
percent ÷ 100 (or its TFLOPS converted with the GPU's capacity). A request with no GPU amount
at all stands for a CPU-only pod (the trace's ``num_gpu = 0``). Ties go to the first node in
node-name order. Whole-GPU requests take the lowest-index fully free GPUs; sharing requests
the GPU the strategy prefers. Rules: hkust-adsl/kubernetes-scheduler-simulator
``pkg/simulator/plugin/{best_fit,random,fgd}_score.go``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import ClassVar, Self

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState, device_order
from services.allocator.domain.need import Need
from services.allocator.domain.taskclass import MILLI_GPU, Workload

MAX_SPEC_CPU = 128_000
"""Simulator constant MaxSpecCpu (millicores) used by best-fit's leftover."""
MAX_SPEC_GPU = 8_000
"""Simulator constant MaxSpecGpu (milli-GPU) used by best-fit's leftover."""
UNKNOWN_CPU = 1 << 40
"""Free CPU assumed for a node that reports no allocatable CPU (CPU is then not checked)."""


def free_milli(gpu: GpuState) -> int:
    """Free share of ``gpu`` in milli-GPU (0-1000)."""
    cap = gpu.spec.capacity.milli_tflops
    return gpu.available_milli_tflops * MILLI_GPU // cap if cap > 0 else 0


def free_millis(gpus: Sequence[GpuState]) -> list[int]:
    """:func:`free_milli` of each of ``gpus``, in order (the hot path of the fragmentation ranks)."""
    out = []
    for g in gpus:
        cap = g.spec.capacity.milli_tflops
        used = g.used_milli_tflops
        out.append((cap - used) * MILLI_GPU // cap if cap > used else 0)
    return out


def share_milli(need: Need, gpu: GpuState) -> int:
    """Per-GPU share of ``need`` on ``gpu`` in milli-GPU, rounded up."""
    if need.percent:
        return -(-need.percent // 100)
    cap = gpu.spec.capacity.milli_tflops
    return -(-need.tflops * MILLI_GPU // cap) if cap > 0 else 0


def cpu_only(need: Need) -> bool:
    """True for a request with no GPU amount (a CPU-only pod of the trace)."""
    return not (need.percent or need.tflops or need.vram or need.shared)


def cpu_free(node: NodeState) -> int:
    """Free CPU millicores of ``node`` (:data:`UNKNOWN_CPU` when it reports none)."""
    return node.cpu_milli - node.used_cpu_milli if node.cpu_milli else UNKNOWN_CPU


def gpu_order(gpu: GpuState) -> tuple[int, str]:
    """Device order: index, then name (:func:`~services.allocator.domain.model.device_order`)."""
    return device_order(gpu.spec)


def stable_hash(*parts: str) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process (no PYTHONHASHSEED)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pick_default(candidates: Sequence[GpuState], need: Need) -> list[GpuState]:
    """Whole GPUs: the lowest-index ones; sharing: the tightest fit (least free), lowest index on ties."""
    if cpu_only(need) or need.count > 1 or need.shared or (need.percent and need.percent >= 100_000):
        return sorted(candidates, key=gpu_order)[: need.count]
    return sorted(candidates, key=lambda g: (free_milli(g), gpu_order(g)))[: need.count]


class PaperStrategy:
    """Base of the paper's scan strategies: ranks independent of the allocation id, no target
    workload, the default GPU pick (:func:`pick_default`)."""

    per_request: ClassVar[bool] = False
    rank_by_name: ClassVar[bool] = False
    targets_workload: ClassVar[bool] = False

    def pick(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> list[GpuState]:
        """Lowest-index whole GPUs, or the tightest-fitting GPU for a share."""
        return pick_default(candidates, need)

    def with_workload(self, workload: Workload) -> Self:
        """No target workload: the strategy itself."""
        return self


class BestFit(PaperStrategy):
    """Simulator BestFit: least leftover 0.5·CPU/128 cores + 0.5·GPU/8 GPUs, integer score 0-100."""

    name: ClassVar[str] = "best-fit"

    def rank(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> tuple[float, ...]:
        """⌊100·(1 − leftover)⌋ (higher first; ties to the first node in order)."""
        gpu_left = sum(free_milli(g) for g in members)
        if not cpu_only(need):
            gpu_left -= sum(share_milli(need, g) for g in candidates[:need.count])
        cpu = cpu_free(node)
        cpu_left = cpu - need.cpu_milli if cpu != UNKNOWN_CPU else 0
        return (math.floor(100 * (1 - (0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU))),)


class RandomFit(PaperStrategy):
    """Random-fit as a floor: the node (and sharing GPU) with the smallest hash of the allocation id
    and its name, so the choice is pseudo-random yet the same on every replay."""

    name: ClassVar[str] = "random"
    per_request: ClassVar[bool] = True
    rank_by_name: ClassVar[bool] = True

    def rank(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> tuple[float, ...]:
        """−stable_hash(allocation id, node name): the smallest hash wins."""
        return (-stable_hash(allocation_id, node.name),)

    def pick(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> list[GpuState]:
        """Whole GPUs lowest index first; a share on the GPU with the smallest hash of the id and its name."""
        if need.count > 1 or cpu_only(need) or (need.percent and need.percent >= 100_000):
            return pick_default(candidates, need)
        return sorted(candidates, key=lambda g: stable_hash(allocation_id, g.spec.name))[: need.count]
