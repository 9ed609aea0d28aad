"""Placement strategies: how nodes are ranked and which GPUs of the chosen node are taken.

TensorFusion gpuallocator strategies (strategy_*.go), scores 0-100 via ``units.normalize``:
- CompactFirst: node and GPU score = normalize(used% VRAM, used% TFLOPS): fullest first.
- LowLoadFirst: node and GPU score = normalize(available%): emptiest first.
- NodeCompactGPULowLoad (default): fullest node first, emptiest GPUs within it.
A node's score is the floor of the mean of its GPUs' node-level scores (TensorFusion's
scheduler-plugin Score; its direct ``Select`` path sums instead, see docs/compatibility.md).
Ties break by node name, then GPU name, so replays reproduce every decision.

Two interfaces: :class:`IndexedStrategy` (a per-node score the scheduler's node index keeps in
order) and :class:`ScanStrategy` (ranks each feasible node itself: plugins of the ATC'23 paper).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import ClassVar, Protocol, runtime_checkable

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.taskclass import Workload
from services.allocator.domain.units import available_percent, normalize


@runtime_checkable
class IndexedStrategy(Protocol):
    """A strategy whose node order is a per-node score the node index keeps (TensorFusion's shape).

    ``node_gpu_score`` is one GPU's contribution to its node's score (0-100; the node's score is
    the floor of the mean over its GPUs, higher first, ties by node name); ``pick`` takes
    ``need.count`` GPUs out of the chosen node's candidates, best first."""

    name: ClassVar[str]

    def node_gpu_score(self, gpu: GpuState, config: PoolConfig) -> int:
        """One GPU's contribution to its node's score (0-100)."""
        ...

    def pick(self, candidates: Sequence[GpuState], need: Need, config: PoolConfig) -> list[GpuState]:
        """``need.count`` GPUs out of one node's candidates, best first."""
        ...


class Members(list[GpuState]):
    """A node's GPUs in node order, passed to a scan strategy as ``members``, tagged with
    ``version``: equal for two lists only while the node and its GPUs did not change between them
    (the Scheduler's rank cache passes (the state's change record, node name, seq of the node's
    last touch), ``ClusterState.changes``). A strategy may memoise what it derives from the node
    under that version; a plain list (the naive reference, a one-off scan) carries none."""

    __slots__ = ("version",)

    def __init__(self, gpus: Iterable[GpuState], version: Hashable) -> None:
        super().__init__(gpus)
        self.version = version


@runtime_checkable
class ScanStrategy(Protocol):
    """A strategy that ranks every feasible node itself (the ATC'23 paper's shape).

    ``rank`` reads one feasible node (its GPUs ``members`` in node order and the ``candidates``
    that passed every filter); the highest rank wins, ties to the first node in name order.
    ``pick`` chooses the GPUs on the winning node. ``per_request`` says the rank reads the
    allocation id (no caching across requests); otherwise a rank may be cached per request
    shape until the node changes. ``rank_by_name`` says the rank reads nothing but the node's
    name and the allocation id (random-fit): the scheduler then ranks the nodes first, with
    empty ``members`` and ``candidates``, and checks feasibility best first, stopping at the
    first feasible node (the same answer as ranking every feasible node). ``with_workload``
    binds the target workload M of the pool (strategies with ``targets_workload``; others
    return themselves)."""

    name: ClassVar[str]
    per_request: ClassVar[bool]
    rank_by_name: ClassVar[bool]
    targets_workload: ClassVar[bool]

    def rank(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> tuple[float, ...]:
        """The node's rank for ``need`` (higher is better)."""
        ...

    def pick(self, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState], need: Need,
             config: PoolConfig, allocation_id: str) -> list[GpuState]:
        """``need.count`` GPUs of the winning node's candidates."""
        ...

    def with_workload(self, workload: Workload) -> ScanStrategy:
        """This strategy against the target workload ``workload`` (a fresh instance, empty caches)."""
        ...


Strategy = IndexedStrategy | ScanStrategy
"""Every registered strategy is one of the two shapes."""


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
    scored = sorted(candidates, key=lambda g: (-score(g, config), g.spec.name))  # type: ignore[operator]
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
