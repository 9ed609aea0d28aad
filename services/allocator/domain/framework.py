"""The filter framework: plugin protocols, the per-decision context, and the two filter passes.

``node_candidates`` is the hot path (one node's GPUs that pass every filter); ``explain`` is the
full pass that counts, per filter, how many GPUs of the pool it removed (TensorFusion
FilterDetail), used when a request is queued or rejected and by ``simulate``. A ``static`` pass
ignores everything that can change (usage, phases, liveness) and answers "could it ever fit?".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

from events.values import FilterCount, PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need

if TYPE_CHECKING:
    from services.allocator.domain.index import NodeFree

SAME_NODE = "SameNodeFilter"
PHASE, ISOLATION, RESOURCE = "PhaseFilter", "GPUIsolationModeFilter", "ResourceFilter"
_BULK_SAFE = frozenset({PHASE, ISOLATION, RESOURCE, "GPUModelFilter", "GPUVendorFilter"})


class Context:
    """What a filter may read besides the GPU/node: the pool settings and the pass mode."""

    __slots__ = ("config", "static")

    def __init__(self, config: PoolConfig, *, static: bool = False) -> None:
        self.config = config
        self.static = static


class GpuFilter(Protocol):
    """Removes single GPUs (TensorFusion filter plugin). ``name`` appears in FilterCount."""

    name: ClassVar[str]

    def enabled(self, need: Need) -> bool:
        """Whether this filter runs for ``need`` at all."""
        ...

    def admits(self, gpu: GpuState, need: Need, ctx: Context) -> bool:
        """True when ``gpu`` stays a candidate."""
        ...


class NodeFilter(Protocol):
    """Removes every GPU of a node at once (liveness, affinity, node CPU/memory, workers)."""

    name: ClassVar[str]

    def enabled(self, need: Need) -> bool:
        """Whether this filter runs for ``need`` at all."""
        ...

    def admits(self, node: NodeState, need: Need, ctx: Context) -> bool:
        """True when ``node``'s GPUs stay candidates."""
        ...


class Chain:
    """The filters enabled for one request, node-level and GPU-level, in registry order."""

    __slots__ = ("bulk", "gpu_filters", "node_filters", "order")

    def __init__(self, node_filters: Sequence[NodeFilter], gpu_filters: Sequence[GpuFilter], need: Need) -> None:
        self.node_filters = tuple(f for f in node_filters if f.enabled(need))
        self.gpu_filters = tuple(f for f in gpu_filters if f.enabled(need))
        self.order = tuple(f.name for f in self.node_filters) + tuple(f.name for f in self.gpu_filters)
        names = {f.name for f in self.gpu_filters}
        self.bulk = names <= _BULK_SAFE and RESOURCE in names and not need.shared

    def node_admits(self, node: NodeState, need: Need, ctx: Context) -> bool:
        """True when every node-level filter admits ``node``."""
        return all(f.admits(node, need, ctx) for f in self.node_filters)

    def node_candidates(
        self, node: NodeState, gpus: dict[str, GpuState], need: Need, ctx: Context
    ) -> list[GpuState]:
        """GPUs of ``node`` that pass every GPU-level filter (node-level filters not included)."""
        filters = self.gpu_filters
        out = []
        for name in node.gpus:
            gpu = gpus[name]
            for f in filters:
                if not f.admits(gpu, need, ctx):
                    break
            else:
                out.append(gpu)
        return out

    def explain(
        self, nodes: Iterable[NodeState], gpus: dict[str, GpuState], need: Need, ctx: Context,
        *, free: Mapping[str, NodeFree] | None = None,
    ) -> tuple[list[FilterCount], int]:
        """Per-filter removal counts over ``nodes`` (in chain order, SameNodeFilter last) and the
        number of nodes left with at least ``need.count`` candidates.

        With ``free`` (the node index's per-node summary), a node where no GPU can hold one share
        is counted in bulk: PhaseFilter and GPUIsolationModeFilter take what they would remove and
        ResourceFilter the rest, which is exactly what the per-GPU walk would count.
        """
        removed = dict.fromkeys(self.order, 0)
        removed[SAME_NODE] = 0
        fitting = 0
        bulk = self.bulk and not ctx.static and free is not None
        for node in nodes:
            rejecting = self._node_rejecting(node, need, ctx)
            if rejecting is not None:
                removed[rejecting] += len(node.gpus)
                continue
            summary = free.get(node.name) if bulk and free is not None else None
            if summary is not None and not summary.may_fit(need):
                self._count_bulk(summary, need, removed)
                continue
            survivors = self._count_survivors(node, gpus, need, ctx, removed)
            if survivors >= need.count:
                fitting += 1
            else:
                removed[SAME_NODE] += survivors
        return [FilterCount(name=k, removed=v) for k, v in removed.items()], fitting

    def _node_rejecting(self, node: NodeState, need: Need, ctx: Context) -> str | None:
        for f in self.node_filters:
            if not f.admits(node, need, ctx):
                return f.name
        return None

    def _count_bulk(self, summary: NodeFree, need: Need, removed: dict[str, int]) -> None:
        isolation = 0
        if ISOLATION in removed and (len(summary.modes) > 1 or "" not in summary.modes):
            isolation = sum(n for mode, n in summary.modes.items() if mode not in ("", need.isolation))
            removed[ISOLATION] += isolation
        removed[PHASE] += summary.ineligible
        removed[RESOURCE] += summary.total - summary.ineligible - isolation

    def _count_survivors(
        self, node: NodeState, gpus: dict[str, GpuState], need: Need, ctx: Context, removed: dict[str, int]
    ) -> int:
        survivors = 0
        for name in node.gpus:
            gpu = gpus[name]
            for f in self.gpu_filters:
                if not f.admits(gpu, need, ctx):
                    removed[f.name] += 1
                    break
            else:
                survivors += 1
        return survivors
