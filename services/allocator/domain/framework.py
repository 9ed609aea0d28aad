"""The filter framework (kube-scheduler's shape): plugin protocols, Status, the per-decision
context, and the two filter passes of one request's chain.

A filter plugin answers a :class:`Status` (code + reason), never a bare bool, and the framework
never names a plugin: what it may skip it learns from what plugins declare (``capacity_bound``).
Three kinds of filter: node filters (a whole node at once), GPU filters (one GPU) and set filters
(a node's candidates judged together after the GPU pass: the hard topology tier; ``fits``).
``node_candidates`` is the hot path (one node's GPUs that pass every filter); ``explain`` is the
full pass that counts, per filter, how many GPUs of the pool it removed (TensorFusion
FilterDetail), used when a request is queued or rejected and by ``simulate``. A ``static`` pass
ignores everything that can change (usage, phases, liveness) and answers "could it ever fit?".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar, NamedTuple, Protocol

from events.values import FilterCount, PoolConfig
from services.allocator.domain.model import AllocationState, GpuState, NodeState
from services.allocator.domain.need import Need

SAME_NODE = "SameNodeFilter"
"""The pseudo-filter of the report: GPUs that passed every filter on a node with too few of them."""

SUCCESS = "Success"
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"


class Status(NamedTuple):
    """A filter's verdict (kube-scheduler framework.Status): ``code`` is :data:`SUCCESS`,
    :data:`UNSCHEDULABLE` (may pass later) or :data:`UNRESOLVABLE`; ``reason`` is for people."""

    code: str
    reason: str = ""


OK = Status(SUCCESS)
"""The one passing status; filters return this very object so the hot path compares identity."""


NO_ALLOCATIONS: Mapping[str, AllocationState] = MappingProxyType({})


class Context:
    """What a filter may read besides the GPU/node: the pool settings, the pass mode and the live
    allocations by id (``ClusterState.allocations``; a GPU's ``charges`` are keyed by them, so a
    filter can read who holds a GPU, e.g. the Dynamic isolation lock). A decision's Context must
    carry the state's allocations; without them a charge's holder is unknown."""

    __slots__ = ("allocations", "config", "static")

    def __init__(self, config: PoolConfig, *, static: bool = False,
                 allocations: Mapping[str, AllocationState] = NO_ALLOCATIONS) -> None:
        self.config = config
        self.static = static
        self.allocations = allocations


class GpuFilter(Protocol):
    """Removes single GPUs (TensorFusion filter plugin). ``name`` appears in FilterCount.

    ``capacity_bound`` declares that the filter checks free capacity that the node index's
    summary bounds (the largest free amounts of the node's GPUs): on a node the summary rules
    out, it removes every GPU that reaches it, so ``explain`` need not ask it or later filters.
    """

    name: ClassVar[str]
    capacity_bound: ClassVar[bool]

    def enabled(self, need: Need) -> bool:
        """Whether this filter runs for ``need`` at all (it may read only what ``shape_key`` covers)."""
        ...

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """:data:`OK` when ``gpu`` stays a candidate, else why not."""
        ...


class NodeFilter(Protocol):
    """Removes every GPU of a node at once (liveness, affinity, node CPU/memory, workers)."""

    name: ClassVar[str]

    def enabled(self, need: Need) -> bool:
        """Whether this filter runs for ``need`` at all (it may read only what ``shape_key`` covers)."""
        ...

    def filter(self, node: NodeState, need: Need, ctx: Context) -> Status:
        """:data:`OK` when ``node``'s GPUs stay candidates, else why not."""
        ...


class SetFilter(Protocol):
    """Removes a node after the GPU pass by judging its candidate GPUs as a set (topology tier).

    Asked only on nodes with at least ``need.count`` candidates; a rejection removes the node's
    candidates (counted under ``name``)."""

    name: ClassVar[str]

    def enabled(self, need: Need) -> bool:
        """Whether this filter runs for ``need`` at all (it may read only what ``shape_key`` covers)."""
        ...

    def filter(self, node: NodeState, candidates: Sequence[GpuState], need: Need, ctx: Context) -> Status:
        """:data:`OK` when ``node`` may hold ``need`` on these candidates, else why not."""
        ...


MayFit = Callable[[str], bool]
"""The node index's summary test for one need: False only when no GPU of the node can hold it."""


class Chain:
    """The filters enabled for one request, node-level, GPU-level and set-level, in registry order."""

    __slots__ = ("before_bound", "gpu_filters", "node_filters", "order", "set_filters")

    def __init__(self, node_filters: Sequence[NodeFilter], gpu_filters: Sequence[GpuFilter], need: Need,
                 set_filters: Sequence[SetFilter] = ()) -> None:
        self.node_filters = tuple(f for f in node_filters if f.enabled(need))
        self.gpu_filters = tuple(f for f in gpu_filters if f.enabled(need))
        self.set_filters = tuple(f for f in set_filters if f.enabled(need))
        self.order = (tuple(f.name for f in self.node_filters) + tuple(f.name for f in self.gpu_filters)
                      + tuple(f.name for f in self.set_filters))
        bound = next((i for i, f in enumerate(self.gpu_filters) if f.capacity_bound), None)
        self.before_bound: tuple[tuple[GpuFilter, ...], str] | None = (
            None if bound is None else (self.gpu_filters[:bound], self.gpu_filters[bound].name))
        """The filters before the first capacity-bound one, and that one's name (None: none)."""

    def node_admits(self, node: NodeState, need: Need, ctx: Context) -> bool:
        """True when every node-level filter admits ``node`` (a loop: the hot path of the rank cache)."""
        for f in self.node_filters:  # noqa: SIM110 - all() over a generator is slower here
            if f.filter(node, need, ctx) is not OK:
                return False
        return True

    def fits(self, node: NodeState, candidates: Sequence[GpuState], need: Need, ctx: Context) -> bool:
        """True when ``candidates`` (the node's GPU pass) number ``need.count`` and every set filter admits them."""
        if len(candidates) < need.count:
            return False
        return all(f.filter(node, candidates, need, ctx) is OK for f in self.set_filters)

    def node_candidates(
        self, node: NodeState, gpus: dict[str, GpuState], need: Need, ctx: Context
    ) -> list[GpuState]:
        """GPUs of ``node`` that pass every GPU-level filter (node-level filters not included)."""
        filters = self.gpu_filters
        out = []
        for name in node.gpus:
            gpu = gpus[name]
            for f in filters:
                if f.filter(gpu, need, ctx) is not OK:
                    break
            else:
                out.append(gpu)
        return out

    def passing(self, members: Sequence[GpuState], need: Need, ctx: Context) -> tuple[int, ...]:
        """Positions in ``members`` (one node's GPUs) of the GPUs that pass every GPU-level filter:
        :meth:`node_candidates` as positions (ints: a memo of them adds nothing for the garbage
        collector to walk)."""
        filters = self.gpu_filters
        out = []
        for i, gpu in enumerate(members):
            for f in filters:
                if f.filter(gpu, need, ctx) is not OK:
                    break
            else:
                out.append(i)
        return tuple(out)

    def explain(
        self, nodes: Iterable[NodeState], gpus: dict[str, GpuState], need: Need, ctx: Context,
        *, may_fit: MayFit | None = None,
    ) -> tuple[list[FilterCount], int]:
        """Per-filter removal counts over ``nodes`` (in chain order, SameNodeFilter last) and the
        number of nodes left with at least ``need.count`` candidates.

        With ``may_fit`` (the node index's summary), on a node it rules out only the filters
        before the first capacity-bound one are asked per GPU; that one takes the rest, which is
        exactly what the full walk would count.
        """
        removed = dict.fromkeys(self.order, 0)
        removed[SAME_NODE] = 0
        fitting = 0
        short = self.before_bound if may_fit is not None and not ctx.static else None
        for node in nodes:
            rejecting = self._node_rejecting(node, need, ctx)
            if rejecting is not None:
                removed[rejecting] += len(node.gpus)
                continue
            if short is not None and may_fit is not None and not may_fit(node.name):
                self._count(node, gpus, need, ctx, removed, short[0], short[1])
                continue
            survivors = self._count(node, gpus, need, ctx, removed, self.gpu_filters, None)
            if survivors < need.count:
                removed[SAME_NODE] += survivors
                continue
            rejecting = self._set_rejecting(node, gpus, need, ctx)
            if rejecting is None:
                fitting += 1
            else:
                removed[rejecting] += survivors
        return [FilterCount(name=k, removed=v) for k, v in removed.items()], fitting

    def _node_rejecting(self, node: NodeState, need: Need, ctx: Context) -> str | None:
        for f in self.node_filters:
            if f.filter(node, need, ctx) is not OK:
                return f.name
        return None

    def _set_rejecting(self, node: NodeState, gpus: dict[str, GpuState], need: Need, ctx: Context) -> str | None:
        if not self.set_filters:
            return None
        candidates = self.node_candidates(node, gpus, need, ctx)
        for f in self.set_filters:
            if f.filter(node, candidates, need, ctx) is not OK:
                return f.name
        return None

    @staticmethod
    def _count(
        node: NodeState, gpus: dict[str, GpuState], need: Need, ctx: Context, removed: dict[str, int],
        filters: tuple[GpuFilter, ...], rest: str | None,
    ) -> int:
        """Count each GPU under the first of ``filters`` that removes it; the ones left go to
        ``rest`` (when given) or are returned as survivors."""
        survivors = 0
        for name in node.gpus:
            gpu = gpus[name]
            for f in filters:
                if f.filter(gpu, need, ctx) is not OK:
                    removed[f.name] += 1
                    break
            else:
                if rest is None:
                    survivors += 1
                else:
                    removed[rest] += 1
        return survivors
