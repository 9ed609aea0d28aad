"""NodeResourcesFilter and MaxWorkersPerNodeFilter: node-level capacity besides GPUs.

CPU (millicores) and memory (bytes) are checked only when both the node reports allocatable
and the request carries a value. Max workers per node follows TensorFusion (maxWorkerPerNode,
0 = unlimited) and counts granted allocations on the node.
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import Context
from services.allocator.domain.model import NodeState
from services.allocator.domain.need import Need


def _fits(allocatable: int, used: int, need: int, *, static: bool) -> bool:
    if not allocatable or not need:
        return True
    return allocatable >= need if static else allocatable - used >= need


class NodeResourcesFilter:
    """The pod's CPU and memory requests fit the node's free allocatable."""

    name: ClassVar[str] = "NodeResourcesFilter"

    def enabled(self, need: Need) -> bool:
        """On when the request carries CPU or memory."""
        return bool(need.cpu_milli or need.memory_bytes)

    def admits(self, node: NodeState, need: Need, ctx: Context) -> bool:
        """Allocatable minus what granted allocations use covers the request (static: allocatable)."""
        return _fits(node.cpu_milli, node.used_cpu_milli, need.cpu_milli, static=ctx.static) and _fits(
            node.memory_bytes, node.used_memory_bytes, need.memory_bytes, static=ctx.static
        )


class MaxWorkersPerNodeFilter:
    """TensorFusion maxWorkerPerNode: a node already running that many workers takes no more."""

    name: ClassVar[str] = "MaxWorkersPerNodeFilter"

    def enabled(self, need: Need) -> bool:
        """Decided per pool in ``admits`` (the limit is a pool setting)."""
        return True

    def admits(self, node: NodeState, need: Need, ctx: Context) -> bool:
        """Fewer workers than the pool's limit (or no limit)."""
        limit = ctx.config.max_workers_per_node
        return limit <= 0 or ctx.static or len(node.workers) < limit
