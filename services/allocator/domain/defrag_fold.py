"""Folding defragmentation events into the projection (part of ``evolve``; pure, deterministic).

A reservation holds its target's capacity without being an allocation: its charges are added to
the target GPUs' ``used_milli_tflops``/``used_vram_bytes`` (so available, every filter, strategy and
preemption plan see them taken), its partitions to the GPUs' ``partitions`` under the key
:func:`hold_key` (a partitioned placement on that GPU then fails closed), its CPU and memory to the
target node's used figures; nothing is added to ``charges`` (which name allocations only) or to any
namespace's quota usage. Freeing subtracts exactly what was added (a GPU or node removed meanwhile
is skipped). Every change touches the target node, so a Scheduler refreshes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events import defrag as dv
from services.allocator.domain.campaign_records import CANCELLED, COMPLETED, Campaign, MoveOutcome, Reservation
from services.allocator.domain.state import ClusterState

HOLD_PREFIX = "defrag:"


def hold_key(allocation_id: str) -> str:
    """The key a reserved partition is kept under in ``GpuState.partitions``."""
    return HOLD_PREFIX + allocation_id


def _hold(state: ClusterState, r: Reservation, sign: int) -> None:
    key = hold_key(r.allocation_id)
    for i, (name, charge) in enumerate(zip(r.target_gpus, r.charges, strict=True)):
        gpu = state.gpus.get(name)
        if gpu is None:
            continue
        gpu.used_milli_tflops += sign * charge.milli_tflops
        gpu.used_vram_bytes += sign * charge.vram_bytes
        if i < len(r.partitions):
            if sign > 0:
                gpu.partitions = {**gpu.partitions, key: r.partitions[i]}
            else:
                gpu.partitions = {k: p for k, p in gpu.partitions.items() if k != key}
    node = state.nodes.get(r.target_node)
    if node is not None:
        node.used_cpu_milli += sign * r.cpu_milli
        node.used_memory_bytes += sign * r.memory_bytes
        state.changes.touch(node.name)


def _started(state: ClusterState, e: dv.DefragStarted) -> None:
    state.campaigns[e.pool] = Campaign(
        campaign_id=e.campaign_id, pool=e.pool, started_at=e.at, deadline=e.deadline, max_moves=e.max_moves,
        max_share_of_namespace_pct=e.max_share_of_namespace_pct, max_milli_tflops=e.max_milli_tflops,
        trigger=e.trigger, planned=e.moves, nodes=list(e.nodes), stopped=e.stopped, reservations={}, outcomes=[])


def _campaign(state: ClusterState, pool: str, campaign_id: str) -> Campaign | None:
    campaign = state.campaigns.get(pool)
    return campaign if campaign is not None and campaign.campaign_id == campaign_id else None


def _reserved(state: ClusterState, e: dv.MoveReserved) -> None:
    campaign = _campaign(state, e.pool, e.campaign_id)
    source = state.allocations.get(e.allocation_id)
    if campaign is None or source is None:
        return  # decide emits MoveReserved only for a live allocation of the running campaign
    r = Reservation(allocation_id=e.allocation_id, spec=source.spec, source_node=e.source_node,
                    source_gpus=list(e.source_gpus), target_node=e.target_node, target_gpus=list(e.target_gpus),
                    charges=list(e.charges), expires_at=e.expires_at, reserved_at=e.at,
                    partitions=list(e.partitions), cpu_milli=e.cpu_milli, memory_bytes=e.memory_bytes)
    campaign.reservations[e.allocation_id] = r
    _hold(state, r, +1)


def _closed(state: ClusterState, pool: str, campaign_id: str, allocation_id: str
            ) -> tuple[Campaign, Reservation] | None:
    campaign = _campaign(state, pool, campaign_id)
    if campaign is None:
        return None
    r = campaign.reservations.pop(allocation_id, None)
    if r is None:
        return None
    _hold(state, r, -1)
    return campaign, r


def _completed(state: ClusterState, e: dv.MoveCompleted) -> None:
    found = _closed(state, e.pool, e.campaign_id, e.allocation_id)
    if found is not None:
        campaign, r = found
        campaign.outcomes.append(MoveOutcome(allocation_id=e.allocation_id, status=COMPLETED, at=e.at,
                                             source_node=r.source_node, target_node=r.target_node,
                                             replacement_id=e.replacement_id))


def _cancelled(state: ClusterState, e: dv.MoveCancelled) -> None:
    found = _closed(state, e.pool, e.campaign_id, e.allocation_id)
    if found is not None:
        campaign, r = found
        campaign.outcomes.append(MoveOutcome(allocation_id=e.allocation_id, status=CANCELLED, at=e.at,
                                             source_node=r.source_node, target_node=r.target_node, code=e.code,
                                             reason=e.reason))


def _ended(state: ClusterState, e: dv.DefragEnded) -> None:
    campaign = _campaign(state, e.pool, e.campaign_id)
    if campaign is None:
        return
    for r in campaign.reservations.values():  # decide cancels them first; a fold never leaves a hold behind
        _hold(state, r, -1)
    campaign.reservations = {}
    campaign.ended_at, campaign.end_code, campaign.end_reason = e.at, e.code, e.reason


HANDLERS: dict[type, Callable[[ClusterState, Any], None]] = {
    dv.DefragStarted: _started,
    dv.MoveReserved: _reserved,
    dv.MoveCompleted: _completed,
    dv.MoveCancelled: _cancelled,
    dv.DefragEnded: _ended,
}
"""The defrag events' folds, merged into ``evolve``'s handlers."""
