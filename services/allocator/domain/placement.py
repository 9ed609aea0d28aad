"""Placement: find the node and GPUs for one request, and what granting it would charge.

``attempt`` is the whole admission of one request against the current state (quota, then the
filter chain and strategy, then the exact quota check with the chosen GPUs); it never mutates.
Indexed strategies walk the pool's nodes best-first and stop at the first node with
``count`` candidates; scan strategies and requests with preferred node affinity look at every
feasible node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from events.values import AllocationSpec, QuotaSpec, Resources
from services.allocator.domain import profile
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.model import GpuState, NodeState, QuotaUsage
from services.allocator.domain.need import Need, ShapeKey, shape_key
from services.allocator.domain.plugins.affinity import preference_weight
from services.allocator.domain.quota import QuotaBlock, check_single, check_totals, usage_of
from services.allocator.domain.state import ClusterState
from services.allocator.domain.units import tflops_on


class Grant(NamedTuple):
    """A placement that passed every check: node, GPUs (in pick order), per-GPU charges, quota usage."""

    node: str
    gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    usage: QuotaUsage


class Blocked(NamedTuple):
    """Why a request does not fit now: ``code`` is ``capacity`` or ``quota``."""

    code: str
    reason: str
    quota: QuotaBlock | None = None


def build_chain(need: Need) -> Chain:
    """The registry's filters enabled for ``need``."""
    return Chain(profile.NODE_FILTERS, profile.GPU_FILTERS, need)


_PREPARED: dict[ShapeKey, tuple[Need, Chain]] = {}
_PREPARED_LIMIT = 4096


def prepare(spec: AllocationSpec) -> tuple[Need, Chain]:
    """``Need`` and filter chain for ``spec``, memoised by request shape (they depend on nothing else)."""
    key = shape_key(spec)
    found = _PREPARED.get(key)
    if found is None:
        if len(_PREPARED) >= _PREPARED_LIMIT:
            _PREPARED.clear()
        need = Need(spec)
        found = _PREPARED[key] = (need, build_chain(need))
    return found


def charge_on(gpu: GpuState, spec: AllocationSpec) -> Resources:
    """What ``spec`` takes from ``gpu``: the whole GPU for ``shared``, else the converted request."""
    cap = gpu.spec.capacity
    if spec.isolation == "shared":
        return Resources(milli_tflops=cap.milli_tflops, vram_bytes=cap.vram_bytes)
    return Resources(milli_tflops=tflops_on(spec.request, cap.milli_tflops), vram_bytes=spec.request.vram_bytes)


def usage_on(gpus: Iterable[GpuState], spec: AllocationSpec) -> QuotaUsage:
    """Quota usage of ``spec`` on these GPUs: Σ converted request and limit, one worker."""
    caps = [g.spec.capacity.milli_tflops for g in gpus]
    return usage_of(
        request_tflops=sum(tflops_on(spec.request, c) for c in caps),
        request_vram=spec.request.vram_bytes * len(caps),
        limit_tflops=sum(tflops_on(spec.limit, c) for c in caps),
        limit_vram=spec.limit.vram_bytes * len(caps),
    )


def lower_bound_usage(spec: AllocationSpec) -> QuotaUsage:
    """Usage known before placement (percent shares count 0 TFLOPS until GPUs are chosen)."""
    n = spec.gpu_count
    return usage_of(
        request_tflops=spec.request.milli_tflops * n, request_vram=spec.request.vram_bytes * n,
        limit_tflops=spec.limit.milli_tflops * n, limit_vram=spec.limit.vram_bytes * n,
    )


def find(
    state: ClusterState, need: Need, chain: Chain, ctx: Context, *, restrict: Iterable[str] | None = None,
    allocation_id: str = "",
) -> tuple[NodeState, list[GpuState]] | None:
    """The node and GPUs the pool's strategy picks for ``need``, or None; ``restrict`` limits nodes."""
    strategy = profile.strategy_for(ctx.config.placement)
    pool = need.pool
    if restrict is None:
        names: Iterable[str] = state.index.ordered(pool, min_class=state.index.min_class(pool, need))
    else:
        names = sorted((n for n in restrict if n in state.nodes and state.nodes[n].pool == pool),
                       key=state.index.sort_key)
    preferring = need.affinity is not None and bool(need.affinity.preferred)
    if strategy.indexed and not preferring:
        for name in names:
            found = _node_fit(state, name, need, chain, ctx)
            if found is not None:
                return state.nodes[name], strategy.pick(found, need, ctx.config)
        return None
    feasible = [(state.nodes[n], f) for n in names if (f := _node_fit(state, n, need, chain, ctx)) is not None]
    if not feasible:
        return None
    if strategy.indexed:
        node, cands = min(feasible, key=lambda p: (
            -preference_weight(need.affinity, p[0].labels), state.index.sort_key(p[0].name)))
        return node, strategy.pick(cands, need, ctx.config)
    return strategy.choose(feasible, need, ctx.config, gpus=state.gpus, allocation_id=allocation_id)


def _node_fit(state: ClusterState, name: str, need: Need, chain: Chain, ctx: Context) -> list[GpuState] | None:
    free = state.index.free.get(name)
    if free is None or not free.may_fit(need):
        return None
    node = state.nodes[name]
    if not chain.node_admits(node, need, ctx):
        return None
    candidates = chain.node_candidates(node, state.gpus, need, ctx)
    return candidates if len(candidates) >= need.count else None


def attempt(state: ClusterState, spec: AllocationSpec, *, restrict: Iterable[str] | None = None) -> Grant | Blocked:
    """Admit ``spec`` now if it fits (quota, filters, strategy, exact quota); never mutates ``state``."""
    quota = state.quotas.get(spec.namespace)
    usage = state.usage.get(spec.namespace) or QuotaUsage()
    if quota is not None:
        block = check_totals(quota, spec.namespace, usage=usage, add=lower_bound_usage(spec))
        if block is not None:
            return Blocked("quota", block.reason, block)
    need, chain = prepare(spec)
    ctx = Context(state.pool_config(spec.pool))
    found = find(state, need, chain, ctx, restrict=restrict, allocation_id=spec.allocation_id)
    if found is None:
        return Blocked("capacity", f"no node in pool {spec.pool} has {spec.gpu_count} GPU(s) that fit")
    node, gpus = found
    add = usage_on(gpus, spec)
    if quota is not None:
        block = _exact_quota(quota, spec, gpus, usage, add)
        if block is not None:
            return Blocked("quota", block.reason, block)
    charges = tuple(charge_on(g, spec) for g in gpus)
    return Grant(node.name, tuple(g.spec.name for g in gpus), charges, add)


def single_caps_on(quota: QuotaSpec, spec: AllocationSpec, gpus: Iterable[GpuState]) -> QuotaBlock | None:
    """Per-workload quota caps against what ``spec`` asks of each of these GPUs (percent converted)."""
    for gpu in gpus:
        cap = gpu.spec.capacity.milli_tflops
        block = check_single(
            quota, spec.namespace, count=spec.gpu_count,
            request=Resources(milli_tflops=tflops_on(spec.request, cap), vram_bytes=spec.request.vram_bytes),
            limit=Resources(milli_tflops=tflops_on(spec.limit, cap), vram_bytes=spec.limit.vram_bytes),
        )
        if block is not None:
            return block
    return None


def _exact_quota(
    quota: QuotaSpec, spec: AllocationSpec, gpus: list[GpuState], usage: QuotaUsage, add: QuotaUsage
) -> QuotaBlock | None:
    if spec.request.compute_milli_percent or spec.limit.compute_milli_percent:
        block = single_caps_on(quota, spec, gpus)
        if block is not None:
            return block
    return check_totals(quota, spec.namespace, usage=usage, add=add)
