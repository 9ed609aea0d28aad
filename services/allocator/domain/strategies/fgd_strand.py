"""fgd-strand: gpuledger's robust fragmentation-aware strategy — FGD, except that among the nodes
FGD scores equal it avoids those where the placement strands GPU behind CPU.

Node choice is lexicographic: (1) FGD's own integer score ⌊100·sigmoid(−Δ/1000)⌋ (strategies/fgd.py,
Weng et al., ATC'23), highest first; (2) among the nodes FGD scores equal, a tie-break that
depends on the request: for a request that takes GPU, the least *stranding increase*
max(0, S_n′(M) − S_n(M)), with S defined below; for a CPU-only request, a node whose CPU is
spare — its free GPU hosts no GPU class of M any more (its CPU is worth nothing to GPU pods) and
the CPU the pod leaves is no more fragmented for M's CPU-only classes (FGD's measure applied to
CPU, :func:`cpu_fragment`) — before any other node; (3) node order, as FGD. The GPUs inside the
chosen node are FGD's choice.
Hence fgd-strand never picks a node FGD scores lower, and it picks exactly FGD's node whenever the
tie-break does not prefer another of FGD's equal nodes: it only vetoes FGD's arbitrary tie-break,
and it never chases a stranding *decrease* (that concentrated load and lost to FGD where CPU is
slack), nor moves a CPU-only pod for a stranding it causes *now* (that spent the CPU cushion of
nodes whose GPUs are still free and lost to FGD where CPU-only pods are 30 % or more of the pods),
nor onto a used-up node where it would cut the CPU left there into pieces too small for later
CPU-only pods (that lost to FGD with 25 % CPU-only pods: docs/placement.md).

Stranded GPU of node n for task class m of the target workload M (per-GPU share d milli-GPU,
k GPUs, c CPU millicores, allowed models T): the GPU milli that m could still fill by GPU but
not by CPU,

    pods_gpu = (Σ_g ⌊R_g / d⌋) // k,   pods_cpu = ⌊cpu_free / c⌋ (pods_gpu when c = 0),
    S_n(m) = k·d·max(0, pods_gpu − pods_cpu)     (0 for CPU-only classes and models not in T),

and S_n(M) = Σ_m w_m·S_n(m) with w_m the class weight in units of 2⁻²⁰ (integers, so the sum is
exact). A node's free GPU hosts class m when pods_gpu ≥ 1 and its model is in T. No constant is
fitted to a trace: M is FGD's target workload (the pool's learned mix, or the trace's typical pods
in the experiment) and the rule has no weight. As a scan strategy (strategies.ScanStrategy) the
lexicographic choice is the rank tuple (FGD score, tie-break); the rank reads only the node and
the request shape, so the Scheduler may cache it like FGD's. Why this generalises:
docs/placement.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.strategies.fgd import NODE_MEMO_LIMIT, Fgd, NodeFrag, sigmoid_score
from services.allocator.domain.strategies.fragmentation import Workload
from services.allocator.domain.strategies.paper import cpu_only, share_milli
from services.allocator.domain.strategies.workload import DEFAULT_WORKLOAD

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


StrandRow = tuple[int, int, int, int, tuple[str, ...]]
"""A GPU class for the hot loop: (integer weight · k · d, index of its share in the table's
shares, k, cpu_milli, models)."""
StrandTable = tuple[tuple[int, ...], tuple[StrandRow, ...]]
"""The distinct per-GPU shares max(d, 1) of a workload's GPU classes, and its GPU classes as rows."""


def strand_table(workload: Workload, weights: Sequence[int]) -> StrandTable:
    """The :data:`StrandTable` of ``workload`` (CPU-only and zero-weight classes add nothing to S)."""
    gpu = [(t, w) for t, w in zip(workload, weights, strict=True) if t.count and w]
    shares = tuple(sorted({max(t.milli, 1) for t, _ in gpu}))
    rows = tuple((w * t.count * t.milli, shares.index(max(t.milli, 1)), t.count, t.cpu_milli, t.models) for t, w in gpu)
    return shares, rows


def share_fill(free: Sequence[int], shares: Sequence[int]) -> list[int]:
    """Σ_g ⌊R_g/d⌋ per share d: how many pods of each per-GPU share the free milli ``free`` hold."""
    return [sum(r // d for r in free) for d in shares]


def stranded_by_table(free: Sequence[int], cpu_free: int, model: str, table: StrandTable) -> int:
    """:func:`stranded` over a :data:`StrandTable`, equal to it (integers throughout): Σ_g ⌊R_g/d⌋
    once per distinct share d instead of once per class."""
    shares, rows = table
    fill = share_fill(free, shares)
    total = 0
    for scale, j, count, cpu, models in rows:
        if models and model not in models:
            continue
        by_gpu = fill[j] // count
        by_cpu = cpu_free // cpu if cpu > 0 else by_gpu
        if by_gpu > by_cpu:
            total += scale * (by_gpu - by_cpu)
    return total


class StrandCache:
    """Memoised :func:`stranded` keyed by (model, free CPU, sorted non-zero free milli: a full GPU
    adds nothing to S); cleared at ``limit``."""

    __slots__ = ("_cache", "limit", "table", "weights", "workload")

    def __init__(self, workload: Workload, *, limit: int = 200_000) -> None:
        self.workload = workload
        self.weights = integer_weights(workload)
        self.table = strand_table(workload, self.weights)
        self.limit = limit
        self._cache: dict[tuple[str, int, tuple[int, ...]], int] = {}

    def get(self, free: Sequence[int], *, cpu_free: int, model: str) -> int:
        """S_n(M) of the node state, computed at most once per distinct state."""
        key = (model, cpu_free, tuple(sorted(r for r in free if r)))
        value = self._cache.get(key)
        if value is None:
            if len(self._cache) >= self.limit:
                self._cache.clear()
            value = stranded_by_table(key[2], cpu_free, model, self.table)
            self._cache[key] = value
        return value


def hosts_gpu_class(free: Sequence[int], model: str, table: StrandTable) -> bool:
    """Whether one pod of some GPU class of the table fits the free GPU milli ``free`` of a node of
    ``model`` by GPU alone (Σ_g ⌊R_g/d⌋ ≥ k, model allowed); CPU is not looked at."""
    shares, rows = table
    fill = share_fill(free, shares)
    return any(fill[j] >= count and not (models and model not in models) for _, j, count, _, models in rows)


CpuClasses = tuple[tuple[int, int], ...]
"""M's CPU-only classes as (CPU millicores c_m, integer weight), for :func:`cpu_fragment`."""


def cpu_classes(workload: Workload, weights: Sequence[int]) -> CpuClasses:
    """The CPU-only classes (k = 0) of ``workload`` that ask for CPU, with their integer weights."""
    return tuple((t.cpu_milli, w) for t, w in zip(workload, weights, strict=True)
                 if t.count == 0 and t.cpu_milli > 0 and w)


def cpu_fragment(cpu_free: int, classes: CpuClasses) -> int:
    """FGD's fragment measure applied to CPU for CPU-only classes: the free CPU (millicores) that a
    class cannot use because it asks for more, Σ_m w_m · cpu_free over the classes with c_m > cpu_free
    (millicores × 2²⁰; FGD's F_n(m) with CPU in place of GPU, Weng et al., ATC'23)."""
    return cpu_free * sum(w for cpu, w in classes if cpu > cpu_free)


class FgdStrand(Fgd):
    """FGD's node score; on ties, for a GPU request the least stranding increase (clipped at 0),
    for a CPU-only request a node whose CPU is spare (:meth:`spare_cpu`); then node order."""

    name: ClassVar[str] = "fgd-strand"

    def __init__(self, workload: Workload = DEFAULT_WORKLOAD) -> None:
        super().__init__(workload)
        self.strand = StrandCache(self.workload)
        self.cpu_classes = cpu_classes(self.workload, self.strand.weights)
        self._before: dict[str, tuple[NodeFrag, int]] = {}
        """Node name -> (the NodeFrag S_n(M) was computed for, S_n(M)): a node's S while FGD's
        per-version memo returns the same NodeFrag (strategies/fgd.py)."""

    def node_stranded(self, node: NodeState, members: Sequence[GpuState]) -> int:
        """S_n(M) of ``node`` now, memoised per node version like FGD's :class:`NodeFrag`."""
        frag = self.node_frag(node, members)
        found = self._before.get(node.name)
        if found is not None and found[0] is frag:
            return found[1]
        if len(self._before) >= NODE_MEMO_LIMIT:
            self._before.clear()
        value = self.strand.get(frag.free, cpu_free=frag.cpu, model=frag.model)
        self._before[node.name] = (frag, value)
        return value

    def gpu_usable(self, node: NodeState, members: Sequence[GpuState]) -> bool:
        """Whether some GPU class of M still fits the node's free GPU (:func:`hosts_gpu_class`);
        asked only for CPU-only requests, whose ranks the Scheduler caches per node version."""
        frag = self.node_frag(node, members)
        return hosts_gpu_class(frag.free, frag.model, self.strand.table)

    def stranding_delta(self, node: NodeState, members: Sequence[GpuState], chosen: Sequence[GpuState],
                        need: Need) -> int:
        """S_n′(M) − S_n(M) (milli-GPU × 2²⁰) when ``need`` takes ``chosen`` GPUs and its CPU on ``node``."""
        before = self.node_stranded(node, members)
        frag = self.node_frag(node, members)
        free, model, cpu = list(frag.free), frag.model, frag.cpu
        if not cpu_only(need):
            for g in chosen:
                free[frag.position[g.spec.name]] -= share_milli(need, g)
        return self.strand.get(free, cpu_free=cpu - need.cpu_milli, model=model) - before

    def spare_cpu(self, node: NodeState, members: Sequence[GpuState], need: Need) -> bool:
        """Whether a CPU-only ``need`` spends CPU that nobody in M would miss: the node's free GPU
        hosts no GPU class of M (:meth:`gpu_usable`) and the CPU it leaves is no more fragmented for
        M's CPU-only classes than before (:func:`cpu_fragment` does not grow)."""
        cpu = self.node_frag(node, members).cpu
        after = cpu_fragment(cpu - need.cpu_milli, self.cpu_classes)
        return after <= cpu_fragment(cpu, self.cpu_classes) and not self.gpu_usable(node, members)

    def rank(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> tuple[float, ...]:
        """(FGD's integer score, tie-break): higher first, ties to node order. The tie-break is
        −max(0, stranding increase) for a GPU request, and for a CPU-only request 0 on a node
        whose CPU it spends is spare (:meth:`spare_cpu`), −1 elsewhere."""
        opt = self.option(node, members, candidates, need)
        if cpu_only(need):
            return (sigmoid_score(opt.delta), 0 if self.spare_cpu(node, members, need) else -1)
        harm = max(0, self.stranding_delta(node, members, opt.gpus, need))
        return (sigmoid_score(opt.delta), -harm)
