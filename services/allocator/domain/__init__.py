"""The allocation domain: pure decisions (``decide``) and the projection fold (``evolve``).

No I/O, no clock, no randomness: time is passed in, ids come with the intents. ``process`` is
what the allocator service runs for each intent (decide, evolve, drain the queue).
Rules follow TensorFusion's gpuallocator (internal/gpuallocator); deviations are listed in
docs/compatibility.md.
"""

from services.allocator.domain.allocate import explain
from services.allocator.domain.decide import decide
from services.allocator.domain.evolve import evolve
from services.allocator.domain.gang import explain as gang_reason
from services.allocator.domain.inventory import expired_nodes
from services.allocator.domain.preempting import preemption_plan
from services.allocator.domain.preemption import NoPlan
from services.allocator.domain.process import process
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState, decode_snapshot, digest, encode_snapshot
from services.allocator.domain.victim_choice import Plan

__all__ = [
    "ClusterState",
    "NoPlan",
    "Plan",
    "Scheduler",
    "decide",
    "decode_snapshot",
    "digest",
    "encode_snapshot",
    "evolve",
    "expired_nodes",
    "explain",
    "gang_reason",
    "preemption_plan",
    "process",
]
