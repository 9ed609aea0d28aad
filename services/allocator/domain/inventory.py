"""Deciding RegisterNode, RemoveNode and CheckHeartbeats: the inventory side of the projection.

RegisterNode is an upsert and the heartbeat: unchanged -> NodeHeartbeat; changed ->
NodeRegistered plus GpuCapacityChanged / GpuPhaseChanged for each GPU that changed; a GPU missing
from the report becomes Unknown (its allocations are kept, flagged, and released normally); a Lost
node that reports again becomes Ready. A node past its heartbeat TTL becomes Lost and its GPUs
leave the candidate set at once (TensorFusion kept using failed nodes: #649/#656).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from events import decisions as ev
from events.intents import CheckHeartbeats, RegisterNode, RemoveNode
from services.allocator.domain import unblocked
from services.allocator.domain.filters.liveness import LOST, READY
from services.allocator.domain.model import MISSING as UNKNOWN
from services.allocator.domain.model import NodeState
from services.allocator.domain.state import ClusterState
from services.allocator.domain.validation import check_name


def _invalid(intent: RegisterNode, field: str, value: str, reason: str, now: datetime) -> list[ev.AnyEvent]:
    return [ev.IntentRejected(at=now, intent_id=intent.intent_id, intent_type="register_node", field=field,
                              value=value, reason=reason)]


def _check(state: ClusterState, intent: RegisterNode, now: datetime) -> list[ev.AnyEvent] | None:
    if not intent.node or not intent.pool:
        field = "node" if not intent.node else "pool"
        return _invalid(intent, field, "", f"{field} must not be empty", now)
    bad_pool = check_name("pool", intent.pool, field="pool")
    if bad_pool:
        return _invalid(intent, *bad_pool, now)
    seen: set[str] = set()
    for i, gpu in enumerate(intent.gpus):
        owner = state.gpus.get(gpu.name)
        if not gpu.name or gpu.name in seen or (owner is not None and owner.node != intent.node):
            return _invalid(intent, f"gpus[{i}].name", gpu.name,
                            f"GPU name {gpu.name!r} is empty, repeated, or belongs to another node", now)
        cap = gpu.capacity
        if cap.milli_tflops < 0 or cap.vram_bytes < 0 or cap.compute_milli_percent:
            return _invalid(intent, f"gpus[{i}].capacity", str(cap), "GPU capacity must be non-negative "
                            "milli-TFLOPS and bytes", now)
        seen.add(gpu.name)
    if intent.cpu_milli < 0 or intent.memory_bytes < 0 or intent.heartbeat_ttl_s < 0:
        return _invalid(intent, "cpu_milli", str(intent.cpu_milli), "allocatable and TTL must not be negative", now)
    return None


def _same(node: NodeState, state: ClusterState, intent: RegisterNode) -> bool:
    return (
        node.pool == intent.pool and node.labels == intent.labels and node.cpu_milli == intent.cpu_milli
        and node.memory_bytes == intent.memory_bytes and node.schedulable == intent.schedulable
        and node.heartbeat_ttl_s == intent.heartbeat_ttl_s and node.source == intent.source
        and all(g.name in state.gpus and state.gpus[g.name].spec == g for g in intent.gpus)
    )


def decide_register(state: ClusterState, intent: RegisterNode, now: datetime) -> list[ev.AnyEvent]:
    """RegisterNode -> NodeRegistered | NodeHeartbeat, plus per-GPU and node phase changes."""
    invalid = _check(state, intent, now)
    if invalid:
        return invalid
    node = state.nodes.get(intent.node)
    if node is not None and _same(node, state, intent):
        events: list[ev.AnyEvent] = [ev.NodeHeartbeat(at=now, node=intent.node, pool=intent.pool)]
    else:
        events = [ev.NodeRegistered(
            at=now, node=intent.node, pool=intent.pool, gpus=intent.gpus, labels=intent.labels,
            cpu_milli=intent.cpu_milli, memory_bytes=intent.memory_bytes, schedulable=intent.schedulable,
            heartbeat_ttl_s=intent.heartbeat_ttl_s, source=intent.source,
        )]
    if node is None:
        return events
    reported = {g.name for g in intent.gpus}
    for spec in intent.gpus:
        old = state.gpus.get(spec.name)
        if old is not None and old.spec.capacity != spec.capacity:
            events.append(ev.GpuCapacityChanged(at=now, gpu=spec.name, node=node.name, pool=intent.pool,
                                                capacity=spec.capacity, previous=old.spec.capacity))
        if old is not None and old.phase != spec.phase:
            events.append(ev.GpuPhaseChanged(at=now, gpu=spec.name, node=node.name, pool=intent.pool,
                                             phase=spec.phase, previous=old.phase, reason="reported"))
    for name in node.gpus:
        if name not in reported and state.gpus[name].phase != UNKNOWN:
            events.append(ev.GpuPhaseChanged(at=now, gpu=name, node=node.name, pool=intent.pool, phase=UNKNOWN,
                                             previous=state.gpus[name].phase, reason="missing from report"))
    if node.phase == LOST:
        events.append(ev.NodePhaseChanged(at=now, node=node.name, pool=intent.pool, phase=READY,
                                          reason="heartbeat resumed"))
    return events


def decide_remove(state: ClusterState, intent: RemoveNode, now: datetime) -> list[ev.AnyEvent]:
    """RemoveNode -> AllocationReleased for each granted allocation on it, then NodeRemoved."""
    node = state.nodes.get(intent.node)
    if node is None:
        return [ev.IntentRejected(at=now, intent_id=intent.intent_id, intent_type="remove_node", field="node",
                                  value=intent.node, reason=f"node {intent.node} is not registered")]
    events: list[ev.AnyEvent] = []
    for allocation_id in sorted(node.workers):
        spec = state.allocations[allocation_id].spec
        events.append(ev.AllocationReleased(
            at=now, allocation_id=allocation_id, namespace=spec.namespace, pod=spec.pod, pool=spec.pool,
            node=node.name, gpus=tuple(state.allocations[allocation_id].gpus), reason="node removed"))
    events.append(ev.NodeRemoved(at=now, node=node.name, pool=node.pool))
    return events


def expired_nodes(state: ClusterState, now: datetime) -> list[str]:
    """Ready nodes with a heartbeat TTL whose last report is older than it, by name."""
    return sorted(
        n.name for n in state.nodes.values()
        if n.heartbeat_ttl_s > 0 and n.phase == READY and n.last_seen is not None
        and now - n.last_seen > timedelta(seconds=n.heartbeat_ttl_s)
    )


def decide_heartbeats(state: ClusterState, intent: CheckHeartbeats, now: datetime) -> list[ev.AnyEvent]:
    """CheckHeartbeats -> HeartbeatsChecked (naming the pools whose time-based blocks ended since the
    last check: domain/unblocked.py), plus NodePhaseChanged(Lost) per expired node."""
    lost = expired_nodes(state, now)
    events: list[ev.AnyEvent] = [ev.HeartbeatsChecked(at=now, lost=tuple(lost), pools=unblocked.pools(state, now))]
    events += [ev.NodePhaseChanged(at=now, node=n, pool=state.nodes[n].pool, phase=LOST,
                                   reason="heartbeat TTL expired") for n in lost]
    return events
