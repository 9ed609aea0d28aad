"""The single registry: the ordered filter chain and the placement strategies by name.

Filter order follows TensorFusion's chain (Phase → Index → Isolation → SharedWhole → Resource →
Model → Vendor → NodeAffinity), with gpuledger's node-level filters (liveness first; CPU/memory
and max workers per node after affinity) and the partition filter last (TensorFusion runs it
before Resource; see filters/partition.py for why it follows). TensorFusion's isolation filter is
split in four (capabilities, static mode, Dynamic conflict, Dynamic lock) so explain names the
cause. Set filters judge a node's candidates as a set after the GPU pass (hard topology). The MIG
template table is the shipped one (services.partitions.templates.shipped: a packaged data file,
read once). Strategies register by the names pools configure. Adding a filter or a strategy is
one plugin file and one line here. Everything here is immutable: a :class:`Profile` is what a
Scheduler is built from.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from services.allocator.domain.filters.affinity import NodeAffinityFilter
from services.allocator.domain.filters.gpu_model import GPUModelFilter, GPUVendorFilter
from services.allocator.domain.filters.isolation import GPUIsolationModeFilter, SharedWholeGPUFilter
from services.allocator.domain.filters.isolation_policy import (
    DynamicIsolationFilter,
    IsolationCapabilityFilter,
    IsolationConflictFilter,
)
from services.allocator.domain.filters.liveness import NodeReadyFilter
from services.allocator.domain.filters.node_resources import MaxWorkersPerNodeFilter, NodeResourcesFilter
from services.allocator.domain.filters.partition import PartitionFilter
from services.allocator.domain.filters.phase import GPUIndexFilter, PhaseFilter
from services.allocator.domain.filters.resources import ResourceFilter
from services.allocator.domain.filters.topology import TopologyFilter
from services.allocator.domain.framework import GpuFilter, NodeFilter, SetFilter
from services.allocator.domain.strategies.base import Strategy
from services.allocator.domain.strategies.fgd import Fgd
from services.allocator.domain.strategies.fgd_strand import FgdStrand
from services.allocator.domain.strategies.frag_cpu import FragCpu
from services.allocator.domain.strategies.paper import BestFit, RandomFit
from services.allocator.domain.strategies.tensorfusion import CompactFirst, LowLoadFirst, NodeCompactGPULowLoad
from services.partitions.templates import TemplateTable, shipped

TEMPLATES = shipped()
"""The MIG template table partitioned requests are placed with."""

NODE_FILTERS: tuple[NodeFilter, ...] = (
    NodeReadyFilter(),
    NodeAffinityFilter(),
    NodeResourcesFilter(),
    MaxWorkersPerNodeFilter(),
)
GPU_FILTERS: tuple[GpuFilter, ...] = (
    PhaseFilter(),
    GPUIndexFilter(),
    IsolationCapabilityFilter(),
    GPUIsolationModeFilter(),
    IsolationConflictFilter(),
    DynamicIsolationFilter(),
    SharedWholeGPUFilter(),
    ResourceFilter(),
    GPUModelFilter(),
    GPUVendorFilter(),
    PartitionFilter(TEMPLATES),
)
SET_FILTERS: tuple[SetFilter, ...] = (TopologyFilter(),)

StrategyClass = type[Strategy]
"""A strategy plugin's class: built with no arguments, once per pool, by the Scheduler."""

STRATEGY_CLASSES: tuple[StrategyClass, ...] = (
    CompactFirst,
    LowLoadFirst,
    NodeCompactGPULowLoad,
    BestFit,
    RandomFit,
    Fgd,
    FragCpu,
    FgdStrand,
)
DEFAULT_STRATEGY = NodeCompactGPULowLoad.name


class Profile(NamedTuple):
    """What a Scheduler is built from: node and GPU filters in chain order, strategies by name,
    set filters (judging a node's candidates together) in order, and the MIG template table
    partitions are placed with (the one its PartitionFilter holds)."""

    node_filters: tuple[NodeFilter, ...]
    gpu_filters: tuple[GpuFilter, ...]
    strategies: Mapping[str, StrategyClass]
    set_filters: tuple[SetFilter, ...] = ()
    templates: TemplateTable = TEMPLATES

    def strategy_class(self, name: str) -> StrategyClass:
        """The strategy registered as ``name``, or the default (TensorFusion falls back the same way)."""
        return self.strategies.get(name) or self.strategies[DEFAULT_STRATEGY]


STRATEGIES: Mapping[str, StrategyClass] = MappingProxyType({cls.name: cls for cls in STRATEGY_CLASSES})
"""Registered strategy names (what ``PoolConfig.placement`` may say) -> class. Read-only."""

DEFAULT_PROFILE = Profile(NODE_FILTERS, GPU_FILTERS, STRATEGIES, set_filters=SET_FILTERS)
"""The registry as one value."""
