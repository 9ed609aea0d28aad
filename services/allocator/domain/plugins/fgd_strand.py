"""fgd-strand: gpuledger's robust fragmentation-aware strategy — FGD, except that among the nodes
FGD scores equal it avoids those where the placement strands GPU behind CPU.

Node choice is lexicographic: (1) FGD's own integer score ⌊100·sigmoid(−Δ/1000)⌋ (plugins/fgd.py,
Weng et al., ATC'23), highest first; (2) among the nodes FGD scores equal, the least *stranding
increase* max(0, S_n′(M) − S_n(M)), with S defined below; (3) node order, as FGD. The GPUs inside
the chosen node are FGD's choice. Hence fgd-strand never picks a node FGD scores lower, and it
picks exactly FGD's node whenever that node's placement does not increase stranding: it only
vetoes FGD's arbitrary tie-break when that would leave more GPU unusable for lack of CPU, and it
never chases a stranding *decrease* (that concentrated load and lost to FGD where CPU is slack:
docs/placement.md).

Stranded GPU of node n for task class m of the target workload M (per-GPU share d milli-GPU,
k GPUs, c CPU millicores, allowed models T): the GPU milli that m could still fill by GPU but
not by CPU,

    pods_gpu = (Σ_g ⌊R_g / d⌋) // k,   pods_cpu = ⌊cpu_free / c⌋ (pods_gpu when c = 0),
    S_n(m) = k·d·max(0, pods_gpu − pods_cpu)     (0 for CPU-only classes and models not in T),

and S_n(M) = Σ_m w_m·S_n(m) with w_m the class weight in units of 2⁻²⁰ (integers, so the sum is
exact). No constant is fitted to a trace: M is FGD's target workload (the pool's learned mix, or
the trace's typical pods in the experiment) and the rule has no weight. As a scan strategy
(strategies.ScanStrategy) the lexicographic choice is the rank tuple (FGD score, −increase); the
rank reads only the node and the request shape, so the Scheduler may cache it like FGD's. Why
this generalises: docs/placement.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.plugins.fgd import Fgd, sigmoid_score
from services.allocator.domain.plugins.fragmentation import Workload
from services.allocator.domain.plugins.workload import DEFAULT_WORKLOAD
from services.allocator.domain.strategies_paper import cpu_only, share_milli

WEIGHT_SCALE = 1 << 20
"""Class weights are rounded to multiples of 2⁻²⁰ so that S_n(M) is an exact integer."""


def integer_weights(workload: Workload) -> tuple[int, ...]:
    """round(w_m · 2²⁰) per class of ``workload``, in order."""
    return tuple(round(t.weight * WEIGHT_SCALE) for t in workload)


def stranded(free: Sequence[int], *, cpu_free: int, model: str, workload: Workload,
             weights: Sequence[int]) -> int:
    """S_n(M) in milli-GPU × 2²⁰ for per-GPU free milli ``free`` (see the module docstring)."""
    total = 0
    for task, weight in zip(workload, weights, strict=True):
        if task.count == 0 or (task.models and model not in task.models):
            continue
        share = max(task.milli, 1)
        by_gpu = sum(r // share for r in free) // task.count
        by_cpu = cpu_free // task.cpu_milli if task.cpu_milli > 0 else by_gpu
        total += weight * task.count * task.milli * max(0, by_gpu - by_cpu)
    return total


class StrandCache:
    """Memoised :func:`stranded` keyed by (model, free CPU, sorted free milli); cleared at ``limit``."""

    __slots__ = ("_cache", "limit", "weights", "workload")

    def __init__(self, workload: Workload, *, limit: int = 200_000) -> None:
        self.workload = workload
        self.weights = integer_weights(workload)
        self.limit = limit
        self._cache: dict[tuple[str, int, tuple[int, ...]], int] = {}

    def get(self, free: Sequence[int], *, cpu_free: int, model: str) -> int:
        """S_n(M) of the node state, computed at most once per distinct state."""
        key = (model, cpu_free, tuple(sorted(free)))
        value = self._cache.get(key)
        if value is None:
            if len(self._cache) >= self.limit:
                self._cache.clear()
            value = stranded(key[2], cpu_free=cpu_free, model=model, workload=self.workload,
                             weights=self.weights)
            self._cache[key] = value
        return value


class FgdStrand(Fgd):
    """FGD's node score; on ties the least stranding increase (clipped at 0), then node order."""

    name: ClassVar[str] = "fgd-strand"

    def __init__(self, workload: Workload = DEFAULT_WORKLOAD) -> None:
        super().__init__(workload)
        self.strand = StrandCache(self.workload)

    def stranding_delta(self, node: NodeState, members: Sequence[GpuState], chosen: Sequence[GpuState],
                        need: Need) -> int:
        """S_n′(M) − S_n(M) (milli-GPU × 2²⁰) when ``need`` takes ``chosen`` GPUs and its CPU on ``node``."""
        frag = self.node_frag(node, members)
        free, model, cpu = list(frag.free), frag.model, frag.cpu
        before = self.strand.get(free, cpu_free=cpu, model=model)
        if not cpu_only(need):
            for g in chosen:
                free[frag.position[g.spec.name]] -= share_milli(need, g)
        return self.strand.get(free, cpu_free=cpu - need.cpu_milli, model=model) - before

    def rank(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> tuple[float, ...]:
        """(FGD's integer score, −max(0, stranding increase)): higher first, ties to node order."""
        opt = self.option(node, members, candidates, need)
        harm = max(0, self.stranding_delta(node, members, opt.gpus, need))
        return (sigmoid_score(opt.delta), -harm)
