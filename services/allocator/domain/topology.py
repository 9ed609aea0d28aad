"""Topology-aware GPU choice inside the chosen node, and the tier arithmetic of the hard filter.

TensorFusion internal/scheduler/gputopo (types.go tiers; numa_evaluator.go and peer_evaluator.go
the choice; gpu_network_topo.go the hard filter). Topology never reorders nodes (their PR #759:
node order belongs to the placement strategy); it only narrows which of the chosen node's
candidate GPUs the strategy may pick, then the strategy picks (its GPU order breaks ties).

Tiers of a placement on a set of GPUs (``GpuSpec.interconnect_group``, ``GpuSpec.numa_node``):
0 fewer than two GPUs, or all in one non-empty interconnect (NVLink) group; 1 all on one known
NUMA node; 2 every NUMA node known, several of them; 3 any NUMA node unknown.

The choice, for a request of ``count`` GPUs among a node's candidates (GPUs that passed every
filter for it), when the pool's ``topology`` is not ``off`` and some candidate has topology data:

- ``count`` ≥ 2: the best achievable tier. Tier 0/1: the interconnect groups (then NUMA nodes)
  holding at least ``count`` candidates are the viable domains; the smallest wins (TensorFusion's
  "fewest excess GPUs": larger domains stay whole), ties to the domain of the strategy's first
  choice among the tied domains' GPUs; the strategy picks inside it. Tier 2: known-NUMA domains
  are filled whole, largest first (ties by NUMA id), the last one partly by the strategy's
  order, which concentrates the GPUs on as few NUMA nodes as possible. Tier 3: the strategy alone.
- ``count`` = 1, "least damage": a candidate's damage is ``(g, n)`` where ``g`` is the number of
  candidates in its interconnect group (0 without one) and ``n`` the number of candidates on its
  NUMA node (0 when unknown). Taking a GPU shrinks exactly those two domains by one, so the
  candidates of least damage (lexicographic) are the ones whose taking leaves the largest
  best-tier groups intact: GPUs without NVLink peers before NVLink ones, unknown NUMA before
  known, smaller domains before larger. The strategy picks among them.

Without topology data on any candidate every damage is (0, 0) and the choice is the strategy's
own, so :func:`choose` returns the strategy's pick at the cost of one scan of the candidates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence

from events.values import PoolConfig
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import Need
from services.allocator.domain.strategies.base import IndexedStrategy, ScanStrategy

TIER_INTERCONNECT = 0
TIER_NUMA = 1
TIER_CROSS_NUMA = 2
TIER_UNKNOWN = 3

Pick = Callable[[Sequence[GpuState]], list[GpuState]]
"""The strategy's pick on a subset of the node's candidates: up to ``count`` GPUs, best first."""


def pick_indexed(strategy: IndexedStrategy, candidates: Sequence[GpuState], need: Need, config: PoolConfig
                 ) -> list[GpuState]:
    """An indexed strategy's GPUs on the chosen node, through :func:`choose` (every scheduler's one GPU rule)."""
    return choose(candidates, need.count, config.topology, lambda c: strategy.pick(c, need, config))


def pick_scan(strategy: ScanStrategy, node: NodeState, members: Sequence[GpuState], candidates: Sequence[GpuState],
              need: Need, config: PoolConfig, allocation_id: str) -> list[GpuState]:
    """A scan strategy's GPUs on the chosen node, through :func:`choose` (every scheduler's one GPU rule)."""
    return choose(candidates, need.count, config.topology,
                  lambda c: strategy.pick(node, members, c, need, config, allocation_id))


def has_topology(gpus: Sequence[GpuState]) -> bool:
    """True when some GPU reports an interconnect group or a NUMA node."""
    return any(g.spec.interconnect_group or g.spec.numa_node is not None for g in gpus)


def tier_of(gpus: Sequence[GpuState]) -> int:
    """The tier (0-3, module docstring) of a placement on exactly these GPUs."""
    if len(gpus) < 2:
        return TIER_INTERCONNECT
    group = gpus[0].spec.interconnect_group
    if group and all(g.spec.interconnect_group == group for g in gpus):
        return TIER_INTERCONNECT
    numas = {g.spec.numa_node for g in gpus}
    if None in numas:
        return TIER_UNKNOWN
    return TIER_NUMA if len(numas) == 1 else TIER_CROSS_NUMA


def _domains(gpus: Sequence[GpuState], key: Callable[[GpuState], Hashable]) -> list[list[GpuState]]:
    """GPUs grouped by ``key`` in first-seen order; GPUs whose key is None or "" belong to no domain."""
    out: dict[Hashable, list[GpuState]] = {}
    for g in gpus:
        k = key(g)
        if k is not None and k != "":
            out.setdefault(k, []).append(g)
    return list(out.values())


def _group(gpu: GpuState) -> str:
    return gpu.spec.interconnect_group


def _numa(gpu: GpuState) -> int | None:
    return gpu.spec.numa_node


def best_tier(candidates: Sequence[GpuState], count: int) -> int:
    """The best tier any ``count`` of ``candidates`` reach (what :func:`choose` achieves)."""
    if count < 2:
        return TIER_INTERCONNECT
    if any(len(d) >= count for d in _domains(candidates, _group)):
        return TIER_INTERCONNECT
    numa = _domains(candidates, _numa)
    if any(len(d) >= count for d in numa):
        return TIER_NUMA
    return TIER_CROSS_NUMA if sum(len(d) for d in numa) >= count else TIER_UNKNOWN


def choose(candidates: Sequence[GpuState], count: int, mode: str, pick: Pick) -> list[GpuState]:
    """The GPUs of one node a request of ``count`` GPUs takes (module docstring), in pick order.

    ``mode`` is the pool's ``topology`` (``off`` leaves the choice to ``pick``); ``pick`` is the
    strategy's own GPU choice on a subset of the candidates."""
    if mode == "off" or not has_topology(candidates):
        return pick(candidates)
    if count == 1:
        return pick(least_damage(candidates))
    if len(candidates) <= count:
        return pick(candidates)
    for key in (_group, _numa):
        viable = [d for d in _domains(candidates, key) if len(d) >= count]
        if viable:
            return pick(_tightest(viable, pick))
    return _spread(candidates, count, pick)


def least_damage(candidates: Sequence[GpuState]) -> list[GpuState]:
    """The candidates whose taking damages the node's best-tier groups least (module docstring)."""
    groups = Counter(g.spec.interconnect_group for g in candidates)
    numas = Counter(g.spec.numa_node for g in candidates)

    def damage(g: GpuState) -> tuple[int, int]:
        group, numa = g.spec.interconnect_group, g.spec.numa_node
        return (groups[group] if group else 0, numas[numa] if numa is not None else 0)

    low = min(damage(g) for g in candidates)
    return [g for g in candidates if damage(g) == low]


def _tightest(viable: list[list[GpuState]], pick: Pick) -> list[GpuState]:
    """The smallest viable domain; among equally small ones, the one holding the strategy's favourite."""
    size = min(len(d) for d in viable)
    tied = [d for d in viable if len(d) == size]
    if len(tied) == 1:
        return tied[0]
    favourite = pick([g for d in tied for g in d])[0]
    return next(d for d in tied if favourite in d)


def _spread(candidates: Sequence[GpuState], count: int, pick: Pick) -> list[GpuState]:
    """Tier 2 (whole known-NUMA domains, largest first) or tier 3 (the strategy's pick)."""
    domains = _domains(candidates, _numa)
    if sum(len(d) for d in domains) < count:
        return pick(candidates)
    domains.sort(key=lambda d: (-len(d), d[0].spec.numa_node or 0))
    chosen: list[GpuState] = []
    for domain in domains:
        left = count - len(chosen)
        if left == 0:
            break
        chosen.extend(domain if len(domain) <= left else pick(domain)[:left])
    return pick(chosen)
