"""frag-pack: gpuledger's own placement strategy — FGD's fragmentation score, ties packed.

FGD (plugins/fgd.py) scores each feasible node by how little the placement raises the node's
fragmentation against the expected workload, on the simulator's coarse integer scale
⌊100·sigmoid(−Δ/1000)⌋; many nodes tie (one step is ~40 milli-GPU of Δ), and FGD leaves the
tie to node order, i.e. chance. frag-pack breaks the tie by best-fit on both resources the
trace binds: the least leftover 0.5·CPU/128 cores + 0.5·GPU/8 GPUs after placement (the
simulator's BestFit measure), then node order. Packing CPU together with GPU keeps whole nodes
— free GPUs *and* the CPU to use them — for the whole-GPU pods that fail last, instead of
stranding idle GPUs on nodes whose CPU the tie-winner happened to drain. See docs/placement.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.plugins.fgd import Fgd, Option, sigmoid_score
from services.allocator.domain.strategies_paper import (
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    UNKNOWN_CPU,
    cpu_free,
    cpu_only,
    free_milli,
    share_milli,
)


def leftover(node: NodeState, gpus: Mapping[str, GpuState], *, gpu_take: int, cpu_take: int) -> float:
    """Best-fit leftover after taking ``gpu_take`` milli-GPU and ``cpu_take`` millicores (0 = full)."""
    gpu_left = sum(free_milli(gpus[n]) for n in node.gpus) - gpu_take
    cpu = cpu_free(node)
    cpu_left = cpu - cpu_take if cpu != UNKNOWN_CPU else 0
    return 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU


class FragPack(Fgd):
    """FGD's integer score first, then the least CPU+GPU leftover, then node order."""

    name: ClassVar[str] = "frag-pack"

    def rank(self, option: Option, node: NodeState, need: Need, gpus: Mapping[str, GpuState]) -> tuple[float, ...]:
        """(FGD score, −leftover): higher ranks first."""
        take = sum(share_milli(need, g) for g in option.gpus) if not cpu_only(need) else 0
        return (sigmoid_score(option.delta), -leftover(node, gpus, gpu_take=take, cpu_take=need.cpu_milli))
