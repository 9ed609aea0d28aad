"""The single registry: the ordered filter chain and the placement strategies by name.

Filter order follows TensorFusion's chain (Phase → Index → Isolation → SharedWhole → Resource →
Model → Vendor → NodeAffinity), with gpuledger's node-level filters (liveness first; CPU/memory
and max workers per node after affinity). Strategies register by the names pools configure.
"""

from __future__ import annotations

from services.allocator.domain.framework import GpuFilter, NodeFilter
from services.allocator.domain.plugins.affinity import NodeAffinityFilter
from services.allocator.domain.plugins.fgd import Fgd
from services.allocator.domain.plugins.fgd_strand import FgdStrand
from services.allocator.domain.plugins.frag_cpu import FragCpu
from services.allocator.domain.plugins.isolation import GPUIsolationModeFilter, SharedWholeGPUFilter
from services.allocator.domain.plugins.liveness import NodeReadyFilter
from services.allocator.domain.plugins.model import GPUModelFilter, GPUVendorFilter
from services.allocator.domain.plugins.node_resources import MaxWorkersPerNodeFilter, NodeResourcesFilter
from services.allocator.domain.plugins.phase import GPUIndexFilter, PhaseFilter
from services.allocator.domain.plugins.resources import ResourceFilter
from services.allocator.domain.strategies import CompactFirst, LowLoadFirst, NodeCompactGPULowLoad, Strategy
from services.allocator.domain.strategies_paper import BestFit, RandomFit

NODE_FILTERS: tuple[NodeFilter, ...] = (
    NodeReadyFilter(),
    NodeAffinityFilter(),
    NodeResourcesFilter(),
    MaxWorkersPerNodeFilter(),
)
GPU_FILTERS: tuple[GpuFilter, ...] = (
    PhaseFilter(),
    GPUIndexFilter(),
    GPUIsolationModeFilter(),
    SharedWholeGPUFilter(),
    ResourceFilter(),
    GPUModelFilter(),
    GPUVendorFilter(),
)

STRATEGIES: dict[str, Strategy] = {}
DEFAULT_STRATEGY = NodeCompactGPULowLoad.name


def register_strategy(strategy: Strategy) -> None:
    """Make ``strategy`` selectable by ``PoolConfig.placement``; re-registering a name replaces it."""
    STRATEGIES[strategy.name] = strategy


def strategy_for(name: str) -> Strategy:
    """The strategy registered as ``name``, or the default (TensorFusion falls back the same way)."""
    return STRATEGIES.get(name) or STRATEGIES[DEFAULT_STRATEGY]


for _strategy in (CompactFirst(), LowLoadFirst(), NodeCompactGPULowLoad(), BestFit(), RandomFit(), Fgd(),
                  FragCpu(), FgdStrand()):
    register_strategy(_strategy)
