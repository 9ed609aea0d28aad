"""NodeReadyFilter: GPUs of Lost (heartbeat TTL expired) or unschedulable (cordoned, NotReady) nodes.

Not in TensorFusion, which kept scheduling onto GPUs of failed nodes (issues #649/#656).
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import Context
from services.allocator.domain.model import NodeState
from services.allocator.domain.need import Need

READY = "Ready"
LOST = "Lost"


class NodeReadyFilter:
    """Removes every GPU of a node that is not Ready or not schedulable (a static pass admits all)."""

    name: ClassVar[str] = "NodeReadyFilter"

    def enabled(self, need: Need) -> bool:
        """Always on."""
        return True

    def admits(self, node: NodeState, need: Need, ctx: Context) -> bool:
        """True for a Ready, schedulable node."""
        return ctx.static or (node.phase == READY and node.schedulable)
