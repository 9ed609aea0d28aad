"""NodeReadyFilter: GPUs of Lost (heartbeat TTL expired) or unschedulable (cordoned, NotReady) nodes.

Not in TensorFusion, which kept scheduling onto GPUs of failed nodes (issues #649/#656).
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import NodeState
from services.allocator.domain.need import Need

READY = "Ready"
LOST = "Lost"


class NodeReadyFilter:
    """Removes every GPU of a node that is not Ready or not schedulable (a static pass admits all)."""

    name: ClassVar[str] = "NodeReadyFilter"
    rejected: ClassVar[Status] = Status(UNSCHEDULABLE, "node is not Ready or not schedulable")

    def enabled(self, need: Need) -> bool:
        """Always on."""
        return True

    def filter(self, node: NodeState, need: Need, ctx: Context) -> Status:
        """OK for a Ready, schedulable node."""
        return OK if ctx.static or (node.phase == READY and node.schedulable) else self.rejected
