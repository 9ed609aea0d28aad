"""ClusterView: what the webhook knows about the cluster when it reviews a pod.

Filled by the watches (WorkloadProfiles, GPUResourceQuotas, PriorityClasses) and by the events stream
(GPU models and their capacity, pools known to the allocator); read by the pure review.
Plain dicts, mutated in place by the single asyncio loop that owns them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events.values import Enforcement, QuotaSpec, Resources
from services.podspec import ComposeContext, PoolDefaults


class ClusterView(msgspec.Struct, kw_only=True):
    """Caches keyed for admission: ``profiles[(namespace, name)]`` is the WorkloadProfile object,
    ``quotas[namespace]`` the first GPUResourceQuota spec, ``model_capacity[model]`` a GPU's full
    capacity, ``node_pools[node]`` the pool of each registered node, ``pool_nodes[pool]`` how many
    it has, and ``configured`` the pools with a configuration (from NodeRegistered/NodeRemoved and
    PoolConfigured/PoolRemoved: the known :attr:`pools`), ``priority_classes[name]`` a
    PriorityClass's ``value``, ``enforcement[pool]`` the pool's mode."""

    pool: PoolDefaults = msgspec.field(default_factory=PoolDefaults)
    profiles: dict[tuple[str, str], dict[str, Any]] = {}
    quotas: dict[str, QuotaSpec] = {}
    model_capacity: dict[str, Resources] = {}
    node_pools: dict[str, str] = {}
    pool_nodes: dict[str, int] = {}
    configured: set[str] = set()
    native_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    priority_classes: dict[str, int] = {}
    enforcement: dict[str, Enforcement] = {}
    """Pool -> its ``enforcement`` mode (from PoolConfigured; an unconfigured pool: ``none``)."""
    replayed: bool = True
    """False while the replay of GPULEDGER_EVENTS that fills this view has not caught up (set by the
    process at start): reviews are refused with 503 then, so no pod is admitted under the default
    enforcement of a pool whose PoolConfigured event is still unread."""

    @property
    def pools(self) -> frozenset[str]:
        """The pools the allocator knows, as its reader's API checks them: those with a node or a
        configuration (empty: nothing is checked)."""
        return frozenset(self.pool_nodes.keys() | self.configured)

    def place_node(self, node: str, pool: str | None) -> None:
        """Record ``node`` in ``pool`` (None: removed), moving it from the pool it was in."""
        before = self.node_pools.pop(node, None)
        if before is not None:
            left = self.pool_nodes[before] - 1
            if left:
                self.pool_nodes[before] = left
            else:
                del self.pool_nodes[before]
        if pool is not None:
            self.node_pools[node] = pool
            self.pool_nodes[pool] = self.pool_nodes.get(pool, 0) + 1

    def context(self, *, review_uid: str) -> ComposeContext:
        """The parser context for one review."""
        pools = self.pools
        return ComposeContext(
            model_capacity=self.model_capacity,
            native_resources=self.native_resources,
            review_uid=review_uid,
            known_pools=pools or None,
            priority_classes=self.priority_classes,
        )
