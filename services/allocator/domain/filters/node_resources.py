"""NodeResourcesFilter and MaxWorkersPerNodeFilter: node-level capacity besides GPUs.

CPU (millicores) and memory (bytes) are checked only when both the node reports allocatable
and the request carries a value. Max workers per node follows TensorFusion (maxWorkerPerNode,
0 = unlimited) and counts granted allocations on the node.
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import NodeState
from services.allocator.domain.need import Need


def _fits(allocatable: int, used: int, need: int, *, static: bool) -> bool:
    if not allocatable or not need:
        return True
    return allocatable >= need if static else allocatable - used >= need


class NodeResourcesFilter:
    """The pod's CPU and memory requests fit the node's free allocatable."""

    name: ClassVar[str] = "NodeResourcesFilter"
    rejected: ClassVar[Status] = Status(UNSCHEDULABLE, "node lacks free CPU or memory")

    def enabled(self, need: Need) -> bool:
        """On when the request carries CPU or memory."""
        return bool(need.cpu_milli or need.memory_bytes)

    def filter(self, node: NodeState, need: Need, ctx: Context) -> Status:
        """Allocatable minus what granted allocations use covers the request (static: allocatable)."""
        fits = _fits(node.cpu_milli, node.used_cpu_milli, need.cpu_milli, static=ctx.static) and _fits(
            node.memory_bytes, node.used_memory_bytes, need.memory_bytes, static=ctx.static)
        return OK if fits else self.rejected


class MaxWorkersPerNodeFilter:
    """TensorFusion maxWorkerPerNode: a node already running that many workers takes no more."""

    name: ClassVar[str] = "MaxWorkersPerNodeFilter"
    rejected: ClassVar[Status] = Status(UNSCHEDULABLE, "node runs the pool's maximum of workers")

    def enabled(self, need: Need) -> bool:
        """Decided per pool in ``admits`` (the limit is a pool setting)."""
        return True

    def filter(self, node: NodeState, need: Need, ctx: Context) -> Status:
        """Fewer workers than the pool's limit (or no limit)."""
        limit = ctx.config.max_workers_per_node
        return OK if limit <= 0 or ctx.static or len(node.workers) < limit else self.rejected
