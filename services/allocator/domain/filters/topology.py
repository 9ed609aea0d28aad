"""TopologyFilter: the hard topology mode's node filter (TensorFusion gputopo gpu_network_topo.go Filter).

Under a pool's ``topology: hard``, a node whose candidate GPUs cannot give a multi-GPU request a
placement of tier ``max_topology_tier`` or better (services.allocator.domain.topology) is
removed. Soft and off never remove a node (topology never reorders nodes). A single-GPU
placement is tier 0 (no GPU-to-GPU traffic), so the filter is off for one GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from services.allocator.domain.framework import OK, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.topology import best_tier


class TopologyFilter:
    """Hard topology: the node's best placement tier must not exceed the pool's max tier."""

    name: ClassVar[str] = "TopologyFilter"

    def enabled(self, need: Need) -> bool:
        """On for requests of two or more GPUs."""
        return need.count > 1

    def filter(self, node: NodeState, candidates: Sequence[GpuState], need: Need, ctx: Context) -> Status:
        """OK unless the pool is ``hard`` and the best tier of ``need.count`` candidates exceeds the max."""
        config = ctx.config
        if config.topology != "hard":
            return OK
        tier = best_tier(candidates, need.count)
        if tier <= config.max_topology_tier:
            return OK
        limit = config.max_topology_tier
        return Status(UNSCHEDULABLE, f"best GPU topology tier {tier} exceeds max_topology_tier {limit}")
