"""The two shapes of a placement strategy, and the GPU list a scan strategy reads.

:class:`IndexedStrategy` (a per-node score the scheduler's node index keeps in order: TensorFusion's
shape) and :class:`ScanStrategy` (ranks each feasible node itself: the ATC'23 paper's shape).
The registry that names them is ``domain.profile``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import ClassVar, Protocol, runtime_checkable

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.taskclass import Workload


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
