"""evolve(state, event) -> state: the one place cluster state changes (the projection fold).

The same function updates the live state after each decision and rebuilds state on replay, so
the two cannot diverge. It reports what it touched in ``state.changes`` (the nodes whose
records, GPUs or pool settings changed; inventory changes), from which a Scheduler refreshes
its index and caches. GPU usage and namespace usage are sums of live charges, added on grant
and subtracted on release with the very amounts recorded, so a release restores exactly; the
partitions a grant records (template and slots) are kept on its GPUs and dropped on release. A
node's ``idle_since`` is the time of the event that left it without a granted allocation (its
registration with none, its last release or preemption) and None while one is granted. Defrag
campaigns and their reservations' holds are folded by domain/defrag_fold.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import msgspec

from events import decisions as ev
from events.values import AllocationSpec, priority_of
from services.allocator.domain.deadlines import PROTECTION_KEY
from services.allocator.domain.defrag_fold import HANDLERS as DEFRAG_HANDLERS
from services.allocator.domain.fairshare import advance, advance_all, forget_unshared
from services.allocator.domain.model import (
    GRANTED,
    QUEUED,
    AllocationState,
    GpuState,
    NodeState,
    QuotaUsage,
    RecentRequests,
    RequestShape,
)
from services.allocator.domain.partition import usage as partition_usage
from services.allocator.domain.placement import usage_on
from services.allocator.domain.state import ClusterState
from services.allocator.domain.target import EPOCH, WINDOW, learned

_EMPTY_USAGE = QuotaUsage()


def _add_usage(state: ClusterState, namespace: str, delta: QuotaUsage, *, sign: int) -> None:
    usage = state.usage.get(namespace)
    if usage is None:
        usage = state.usage[namespace] = QuotaUsage()
    usage.requests_milli_tflops += sign * delta.requests_milli_tflops
    usage.requests_vram_bytes += sign * delta.requests_vram_bytes
    usage.limits_milli_tflops += sign * delta.limits_milli_tflops
    usage.limits_vram_bytes += sign * delta.limits_vram_bytes
    usage.workers += sign * delta.workers
    if usage == _EMPTY_USAGE:
        del state.usage[namespace]


def _granted(state: ClusterState, e: ev.AllocationGranted) -> None:
    spec, aid = e.spec, e.spec.allocation_id
    if not e.from_queue:
        _arrived(state, spec)
    previous = state.allocations.get(aid)
    if previous is not None and previous.status == QUEUED:
        state.queue.remove(aid, previous.spec.qos)
    gpus = [state.gpus[name] for name in e.gpus]
    usage = partition_usage(e.charges) if e.partitions else usage_on(gpus, spec)
    for gpu, charge in zip(gpus, e.charges, strict=True):
        gpu.charges[aid] = charge
        gpu.used_milli_tflops += charge.milli_tflops
        gpu.used_vram_bytes += charge.vram_bytes
    for gpu, held in zip(gpus, e.partitions, strict=False):
        gpu.partitions = {**gpu.partitions, aid: held}  # a new dict: scratch copies of a GPU may share the old one
    node = state.nodes[e.node]
    node.workers.append(aid)
    node.idle_since = None
    node.used_cpu_milli += spec.cpu_milli
    node.used_memory_bytes += spec.memory_bytes
    _add_usage(state, spec.namespace, usage, sign=1)
    allocation = state.allocations[aid] = AllocationState(
        spec=spec, status=GRANTED, requested_at=previous.requested_at if previous else e.at, node=e.node,
        gpus=list(e.gpus), charges=list(e.charges), granted_at=e.at, usage=usage, partitions=list(e.partitions),
        share=e.share, borrowed=e.borrowed,
    )
    if state.share_index.terms:
        advance(state, spec.pool, e.at)
        state.share_index.charge(allocation, 1)
    state.deadlines.add(allocation)
    state.gangs.granted(spec)
    state.changes.touch(e.node, granted=True, protected=bool(spec.attributes.get(PROTECTION_KEY)))


def _arrived(state: ClusterState, spec: AllocationSpec) -> None:
    """Record a request's shape in its pool's recent requests; adopt a learned mix at an epoch
    crossing (rule: services.allocator.domain.target)."""
    recent = state.recent.get(spec.pool)
    if recent is None:
        recent = state.recent[spec.pool] = RecentRequests()
    recent.arrivals += 1
    recent.shapes.append(RequestShape(spec.cpu_milli, spec.request.milli_tflops, spec.request.compute_milli_percent,
                                      spec.gpu_count, spec.gpu_models, spec.request.vram_bytes,
                                      spec.isolation == "shared"))
    if len(recent.shapes) > WINDOW:
        del recent.shapes[0]
    if recent.arrivals % EPOCH == 0:
        mix = learned(state, spec.pool, recent)
        if mix is not None:
            recent.mix = mix


def _queued(state: ClusterState, e: ev.AllocationQueued) -> None:
    _arrived(state, e.spec)
    allocation = AllocationState(spec=e.spec, status=QUEUED, requested_at=e.at, queue_seq=state.queue.next_seq,
                                 reason=e.reason, code=e.code)
    state.allocations[e.spec.allocation_id] = allocation
    state.queue.add(allocation)
    state.gangs.queued(e.spec)


def _released(state: ClusterState, e: ev.AllocationReleased | ev.AllocationPreempted) -> None:
    """A release, and a preemption (folded exactly like a release of the victim: its recorded
    charges and usage go back, so usage stays the sum of live charges)."""
    allocation = state.allocations.pop(e.allocation_id, None)
    if allocation is None:
        return
    state.gangs.left(allocation.spec)
    if allocation.status == QUEUED:
        state.queue.remove(e.allocation_id, allocation.spec.qos)
        return
    state.deadlines.remove(e.allocation_id)
    for name, charge in zip(allocation.gpus, allocation.charges, strict=True):
        gpu = state.gpus[name]
        del gpu.charges[e.allocation_id]
        if e.allocation_id in gpu.partitions:
            gpu.partitions = {k: p for k, p in gpu.partitions.items() if k != e.allocation_id}
        gpu.used_milli_tflops -= charge.milli_tflops
        gpu.used_vram_bytes -= charge.vram_bytes
    node = state.nodes[allocation.node]
    node.workers.remove(e.allocation_id)
    if not node.workers:
        node.idle_since = e.at
    node.used_cpu_milli -= allocation.spec.cpu_milli
    node.used_memory_bytes -= allocation.spec.memory_bytes
    _add_usage(state, allocation.spec.namespace, allocation.usage or _EMPTY_USAGE, sign=-1)
    if state.share_index.terms:
        advance(state, allocation.spec.pool, e.at)
        state.share_index.charge(allocation, -1)
    state.changes.touch(node.name, grew=priority_of(allocation.spec))


RECLAIM_WINDOW = timedelta(minutes=1)
"""How far back ``ClusterState.reclaims`` remembers (PoolConfig ``reclaim_max_per_minute``)."""


def _preempted(state: ClusterState, e: ev.AllocationPreempted) -> None:
    """A preemption folds as a release; a reclaim's time is also kept for its pool's rate bound."""
    _released(state, e)
    if e.reclaim:
        times = state.reclaims.setdefault(e.pool, [])
        times.append(e.at)
        start = e.at - RECLAIM_WINDOW
        while times[0] <= start:
            del times[0]


def _resized(state: ClusterState, e: ev.AllocationResized) -> None:
    allocation = state.allocations[e.allocation_id]
    gpus = [state.gpus[name] for name in allocation.gpus]
    for gpu, old, new in zip(gpus, allocation.charges, e.charges, strict=True):
        gpu.used_milli_tflops += new.milli_tflops - old.milli_tflops
        gpu.used_vram_bytes += new.vram_bytes - old.vram_bytes
        gpu.charges[e.allocation_id] = new
    allocation.spec = msgspec.structs.replace(allocation.spec, request=e.request, limit=e.limit)
    usage = usage_on(gpus, allocation.spec)
    _add_usage(state, allocation.spec.namespace, allocation.usage or _EMPTY_USAGE, sign=-1)
    _add_usage(state, allocation.spec.namespace, usage, sign=1)
    if state.share_index.terms:
        advance(state, allocation.spec.pool, e.at)
        state.share_index.charge(allocation, -1)
    allocation.charges = list(e.charges)
    allocation.usage = usage
    if state.share_index.terms:
        state.share_index.charge(allocation, 1)
    state.changes.touch(allocation.node)


def _set_pool(state: ClusterState, node: NodeState, pool: str) -> None:
    members = state.pool_nodes.get(node.pool)
    if members is not None:
        members.discard(node.name)
        if not members:
            del state.pool_nodes[node.pool]
    node.pool = pool
    state.pool_nodes.setdefault(pool, set()).add(node.name)
    for name in node.gpus:
        state.gpus[name].pool = pool


def _registered(state: ClusterState, e: ev.NodeRegistered) -> None:
    state.changes.inventory += 1
    node = state.nodes.get(e.node)
    if node is None:
        node = state.nodes[e.node] = NodeState(name=e.node, pool=e.pool)
    node.labels, node.cpu_milli, node.memory_bytes = dict(e.labels), e.cpu_milli, e.memory_bytes
    node.schedulable, node.heartbeat_ttl_s, node.source, node.last_seen = (
        e.schedulable, e.heartbeat_ttl_s, e.source, e.at)
    reported = [g.name for g in e.gpus]
    reported_set = set(reported)
    for spec in e.gpus:
        gpu = state.gpus.get(spec.name)
        if gpu is None:
            state.gpus[spec.name] = GpuState(spec=spec, node=e.node, pool=e.pool, phase=spec.phase)
        else:
            gpu.spec, gpu.phase = spec, spec.phase
    node.gpus = reported + [name for name in node.gpus if name not in reported_set]
    if not node.workers and node.idle_since is None:
        node.idle_since = e.at  # a new node idle from its registration
    _set_pool(state, node, e.pool)
    state.changes.touch(e.node)


def _heartbeat(state: ClusterState, e: ev.NodeHeartbeat) -> None:
    state.nodes[e.node].last_seen = e.at


def _node_removed(state: ClusterState, e: ev.NodeRemoved) -> None:
    state.changes.inventory += 1
    node = state.nodes.pop(e.node)
    for name in node.gpus:
        del state.gpus[name]
    members = state.pool_nodes[node.pool]
    members.discard(node.name)
    if not members:
        del state.pool_nodes[node.pool]
    state.changes.touch(node.name)


def _node_phase(state: ClusterState, e: ev.NodePhaseChanged) -> None:
    state.nodes[e.node].phase = e.phase
    state.changes.touch(e.node)


def _gpu_capacity(state: ClusterState, e: ev.GpuCapacityChanged) -> None:
    state.changes.inventory += 1
    gpu = state.gpus[e.gpu]
    gpu.spec = msgspec.structs.replace(gpu.spec, capacity=e.capacity)
    state.changes.touch(gpu.node)


def _gpu_phase(state: ClusterState, e: ev.GpuPhaseChanged) -> None:
    gpu = state.gpus[e.gpu]
    gpu.phase = e.phase
    state.changes.touch(gpu.node)


def _quota_set(state: ClusterState, e: ev.QuotaSet) -> None:
    state.quotas[e.namespace] = e.spec


def _quota_removed(state: ClusterState, e: ev.QuotaRemoved) -> None:
    state.quotas.pop(e.namespace, None)


def _share_set(state: ClusterState, e: ev.ShareSet) -> None:
    advance_all(state, e.at)
    state.shares[e.name] = e.spec
    _shares_changed(state)
    forget_unshared(state)


def _share_removed(state: ClusterState, e: ev.ShareRemoved) -> None:
    advance_all(state, e.at)
    state.shares.pop(e.name, None)
    _shares_changed(state)
    forget_unshared(state)


def _shares_changed(state: ClusterState) -> None:
    """Rebuild the share lookups and usage, and mark every node of the pools with shares before or
    after as touched (what may be borrowed or reclaimed there changed)."""
    before = set(state.share_index.terms)
    state.share_index.rebuild(state.shares, state.allocations.values())
    for pool in sorted(before | set(state.share_index.terms)):
        for name in sorted(state.pool_nodes.get(pool, ())):
            state.changes.touch(name)


def _pool_configured(state: ClusterState, e: ev.PoolConfigured) -> None:
    advance(state, e.pool, e.at)  # decayed under the old half-life up to now
    state.pools[e.pool] = e.config
    if e.config.fair_share_half_life_s <= 0:
        state.decayed.pop(e.pool, None)
    state.changes.inventory += 1  # pool settings (isolation policy, hard topology) change what could ever fit
    for name in sorted(state.pool_nodes.get(e.pool, ())):
        state.changes.touch(name)


def _pool_removed(state: ClusterState, e: ev.PoolRemoved) -> None:
    state.pools.pop(e.pool, None)  # decide removes only a pool without nodes or live allocations
    state.decayed.pop(e.pool, None)
    state.changes.inventory += 1


def _heartbeats_checked(state: ClusterState, e: ev.HeartbeatsChecked) -> None:
    """The check's time bounds the time-based blocks the next one retries (domain/unblocked.py)."""
    state.checked_at = e.at


_HANDLERS: dict[type, Callable[[ClusterState, Any], None]] = {
    ev.AllocationGranted: _granted,
    ev.AllocationQueued: _queued,
    ev.AllocationReleased: _released,
    ev.AllocationPreempted: _preempted,
    ev.AllocationResized: _resized,
    ev.NodeRegistered: _registered,
    ev.NodeHeartbeat: _heartbeat,
    ev.NodeRemoved: _node_removed,
    ev.NodePhaseChanged: _node_phase,
    ev.GpuCapacityChanged: _gpu_capacity,
    ev.GpuPhaseChanged: _gpu_phase,
    ev.QuotaSet: _quota_set,
    ev.QuotaRemoved: _quota_removed,
    ev.ShareSet: _share_set,
    ev.ShareRemoved: _share_removed,
    ev.PoolConfigured: _pool_configured,
    ev.PoolRemoved: _pool_removed,
    ev.HeartbeatsChecked: _heartbeats_checked,
    **DEFRAG_HANDLERS,
}


def evolve(state: ClusterState, event: ev.AnyEvent) -> ClusterState:
    """Fold ``event`` into ``state`` (in place) and return it. Events that change nothing
    (rejections, IntentRejected) are accepted and ignored."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(state, event)
    return state
