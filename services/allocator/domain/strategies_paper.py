"""Scan strategies of the ATC'23 "Beware of Fragmentation" paper, and gpuledger's own ``frag-pack``.

All of them see every feasible node (``indexed = False``) and work in milli-GPU: a GPU's free
milli is ``available TFLOPS × 1000 // capacity``; a request's per-GPU share is its compute
percent ÷ 100 (or its TFLOPS converted with the GPU's capacity). A request with no GPU amount
at all stands for a CPU-only pod (the trace's ``num_gpu = 0``). Ties go to the first node in
the feasible order, which is node-name order because these strategies score every GPU 0 in
the node index. Whole-GPU requests take the lowest-index fully free GPUs; sharing requests
the GPU the strategy prefers. Rules: hkust-adsl/kubernetes-scheduler-simulator
``pkg/simulator/plugin/{best_fit,random,fgd}_score.go`` (spec/fgd.md §3-§5).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.plugins.fragmentation import MILLI_GPU

MAX_SPEC_CPU = 128_000
"""Simulator constant MaxSpecCpu (millicores) used by best-fit's leftover."""
MAX_SPEC_GPU = 8_000
"""Simulator constant MaxSpecGpu (milli-GPU) used by best-fit's leftover."""
UNKNOWN_CPU = 1 << 40
"""Free CPU assumed for a node that reports no allocatable CPU (CPU is then not checked)."""

Pair = tuple[NodeState, list[GpuState]]


def free_milli(gpu: GpuState) -> int:
    """Free share of ``gpu`` in milli-GPU (0-1000)."""
    cap = gpu.spec.capacity.milli_tflops
    return gpu.available_milli_tflops * MILLI_GPU // cap if cap > 0 else 0


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
    """Device order: index, then name."""
    return (gpu.spec.index if gpu.spec.index is not None else 0, gpu.spec.name)


def stable_hash(*parts: str) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process (no PYTHONHASHSEED)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pick_default(candidates: Sequence[GpuState], need: Need) -> list[GpuState]:
    """Whole GPUs: the lowest-index ones; sharing: the tightest fit (least free), lowest index on ties."""
    if cpu_only(need) or need.count > 1 or need.shared or (need.percent and need.percent >= 100_000):
        return sorted(candidates, key=gpu_order)[: need.count]
    return sorted(candidates, key=lambda g: (free_milli(g), gpu_order(g)))[: need.count]


class ScanStrategy:
    """Base of strategies that see every feasible node: constant index score, default GPU pick."""

    indexed: ClassVar[bool] = False

    def node_gpu_score(self, gpu: GpuState, config: PoolConfig) -> int:
        """Constant: the node index then orders nodes by name, the tie-break order."""
        return 0

    def pick(self, candidates: Sequence[GpuState], need: Need, config: PoolConfig) -> list[GpuState]:
        """Lowest-index whole GPUs, or the tightest-fitting GPU for a share."""
        return pick_default(candidates, need)


class BestFit(ScanStrategy):
    """Simulator BestFit: least leftover 0.5·CPU/128 cores + 0.5·GPU/8 GPUs, integer score 0-100."""

    name: ClassVar[str] = "best-fit"

    def choose(self, feasible: Sequence[Pair], need: Need, config: PoolConfig,
               *, gpus: Mapping[str, GpuState], allocation_id: str = "") -> Pair | None:
        """The node with the highest ⌊100·(1 − leftover)⌋, first in order on ties."""
        best: tuple[int, Pair] | None = None
        for node, cands in feasible:
            members = [gpus[n] for n in node.gpus]
            gpu_left = sum(free_milli(g) for g in members) - sum(share_milli(need, g) for g in cands[:need.count])
            if cpu_only(need):
                gpu_left = sum(free_milli(g) for g in members)
            cpu = cpu_free(node)
            cpu_left = cpu - need.cpu_milli if cpu != UNKNOWN_CPU else 0
            score = math.floor(100 * (1 - (0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU)))
            if best is None or score > best[0]:
                best = (score, (node, cands))
        if best is None:
            return None
        node, cands = best[1]
        return node, self.pick(cands, need, config)


class RandomFit(ScanStrategy):
    """Random-fit as a floor: the node (and sharing GPU) with the smallest hash of the allocation id
    and its name, so the choice is pseudo-random yet the same on every replay."""

    name: ClassVar[str] = "random"

    def choose(self, feasible: Sequence[Pair], need: Need, config: PoolConfig,
               *, gpus: Mapping[str, GpuState], allocation_id: str = "") -> Pair | None:
        """Smallest stable_hash(allocation id, node name)."""
        if not feasible:
            return None
        key = allocation_id
        node, cands = min(feasible, key=lambda p: stable_hash(key, p[0].name))
        return node, self.pick_hashed(cands, need, key)

    def pick_hashed(self, candidates: Sequence[GpuState], need: Need, key: str) -> list[GpuState]:
        """Whole GPUs lowest index first; a share on the GPU with the smallest hash of ``key`` and its name."""
        if need.count > 1 or cpu_only(need) or (need.percent and need.percent >= 100_000):
            return pick_default(candidates, need)
        return sorted(candidates, key=lambda g: stable_hash(key, g.spec.name))[: need.count]
