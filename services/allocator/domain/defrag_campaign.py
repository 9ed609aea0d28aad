"""Deciding a defragmentation campaign: start (plan and reserve), the replacement's grant, refused
evictions, cancellation, deadline and expiry (pure: no I/O, no clock).

Rules (docs/allocation.md, "Executing a plan: defrag run"):

- **Start** (:func:`decide_start`): the pool's consolidation plan
  (:func:`services.allocator.domain.consolidation.planned`) under the intent's budget; one
  ``DefragStarted`` and one ``MoveReserved`` per move, all in one decision. Every move's target is
  reserved at once: the plan placed each move into free capacity of a node it never drains, so the
  holds together never exceed what is free (the property tests check it). A pool runs one campaign
  at a time. A plan without moves starts and ends the campaign in the same decision.
- **Replacement** (:func:`replacement`): a RequestAllocation of the same pool, namespace and
  workload (``AllocationSpec.workload``: a Deployment's pods share it) with the same shape (request,
  limit, GPU count, QoS, priority, isolation, models, vendor, indices, affinity, CPU, memory,
  partition template, gang) as a moved allocation is granted that move's reserved GPUs, before any
  other placement: ``MoveCompleted`` then its ``AllocationGranted``. Reserved moves are matched in
  reservation order. No quota total is checked for it: the move keeps the workload's usage once
  the source's pod has terminated (until then the namespace counts both, as during a rolling update).
- **Refused eviction** (:func:`decide_cancel_move`): the binder reports it (CancelMove); the move is
  cancelled and its hold freed.
- **Deadline and expiry** (:func:`expire`, decided on CheckHeartbeats, which the loop publishes when
  :func:`due`): at the deadline every open move is cancelled and the campaign ends (``deadline``); a
  reservation past its ``expires_at``, or whose target node left or is not Ready, is cancelled. A
  crash mid-campaign therefore leaves no hold that outlives the deadline.
- **End**: the decision that closes the last open move appends ``DefragEnded`` (``done``).
- **Schedule** (:func:`scheduled`): a pool whose config has an enabled ``defrag`` schedule starts a
  campaign for the latest cron tick within the last ``max_duration_s`` (TensorFusion
  internal/controller/gpupool_defrag.go ``selectDefragCampaign``) when none runs and its last one
  started before that tick; the campaign ends ``max_duration_s`` after the tick. The loop publishes
  the StartDefrag (intent id named after pool and tick, so two ticks never start it twice).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from events import decisions as ev
from events import defrag as dv
from events.base import Intent
from events.values import AllocationSpec
from services.allocator.domain.campaign_records import Campaign, Reservation
from services.allocator.domain.consolidation import Budget, planned
from services.allocator.domain.defrag_schedule import latest_tick
from services.allocator.domain.filters.liveness import READY
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.validation import check_name

CANCEL_MOVE_CODES = ("eviction_refused", "source_gone")
"""The codes a CancelMove may carry (the binder's reports)."""


def _rejected(intent: Intent, tag: str, field: str, value: str, reason: str, now: datetime) -> list[ev.AnyEvent]:
    return [ev.IntentRejected(at=now, intent_id=intent.intent_id, intent_type=tag, field=field, value=value,
                              reason=reason)]


def running(state: ClusterState, pool: str) -> Campaign | None:
    """The campaign running in ``pool``, or None."""
    campaign = state.campaigns.get(pool)
    return campaign if campaign is not None and campaign.running else None


def decide_start(state: ClusterState, intent: dv.StartDefrag, now: datetime, scheduler: Scheduler
                 ) -> list[ev.AnyEvent]:
    """StartDefrag -> DefragStarted + MoveReserved per planned move (+ DefragEnded when there is
    none), or IntentRejected naming the field: a bad pool name, a pool with no node, a campaign
    already running there, a budget out of range."""
    tag, pool = "start_defrag", intent.pool
    problem = check_name("pool", pool, field="pool")
    if problem is not None:
        return _rejected(intent, tag, *problem, now)
    if pool not in state.pool_nodes:
        return _rejected(intent, tag, "pool", pool, f"pool {pool} has no node to consolidate", now)
    current = running(state, pool)
    if current is not None:
        return _rejected(intent, tag, "pool", pool,
                         f"campaign {current.campaign_id} is running in pool {pool} until "
                         f"{current.deadline.isoformat()}; cancel it first (gpuledger defrag cancel {pool})", now)
    try:
        budget = Budget(max_moves=intent.max_moves, max_share_of_namespace_pct=intent.max_share_of_namespace_pct,
                        max_milli_tflops=intent.max_milli_tflops)
    except ValueError as exc:
        return _rejected(intent, tag, "max_moves", str(intent.max_moves), str(exc), now)
    plan, _ = planned(state, pool, budget, now, scheduler)
    deadline = now + timedelta(seconds=intent.max_duration_s)
    cid = intent.intent_id
    moves = plan.moves
    out: list[ev.AnyEvent] = [dv.DefragStarted(
        at=now, campaign_id=cid, pool=pool, deadline=deadline, max_moves=budget.max_moves,
        max_share_of_namespace_pct=budget.max_share_of_namespace_pct, max_milli_tflops=budget.max_milli_tflops,
        moves=len(moves), nodes=plan.nodes_emptied, trigger=intent.trigger, stopped=plan.stopped)]
    for move in moves:
        spec = state.allocations[move.allocation_id].spec
        out.append(dv.MoveReserved(
            at=now, campaign_id=cid, pool=pool, allocation_id=move.allocation_id, namespace=move.namespace,
            pod=move.pod, workload=spec.workload, source_node=move.source_node, source_gpus=move.source_gpus,
            target_node=move.target_node, target_gpus=move.target_gpus, charges=move.charges, expires_at=deadline,
            partitions=move.partitions, cpu_milli=spec.cpu_milli, memory_bytes=spec.memory_bytes))
    if not moves:
        why = "; ".join(f"{s.node}: {s.reason}" for s in plan.skipped[:5]) or "no busy node to empty"
        out.append(dv.DefragEnded(at=now, campaign_id=cid, pool=pool, code="done", reason=f"nothing to move: {why}"))
    return out


def _ended_if_last(campaign: Campaign, *, completing: int, cancelling: int, now: datetime) -> list[ev.AnyEvent]:
    """DefragEnded(done) when ``completing`` + ``cancelling`` moves close every open one."""
    if len(campaign.reservations) > completing + cancelling:
        return []
    return [dv.DefragEnded(at=now, campaign_id=campaign.campaign_id, pool=campaign.pool, code="done",
                           completed=campaign.completed + completing, cancelled=campaign.cancelled + cancelling,
                           reason="every move completed or was cancelled")]


def _cancel(campaign: Campaign, r: Reservation, code: dv.MoveCancelCode, reason: str, now: datetime
            ) -> dv.MoveCancelled:
    return dv.MoveCancelled(at=now, campaign_id=campaign.campaign_id, pool=campaign.pool,
                            allocation_id=r.allocation_id, node=r.target_node, code=code, reason=reason)


def _end(campaign: Campaign, code: dv.MoveCancelCode, end: dv.DefragEndCode, reason: str, now: datetime
         ) -> list[ev.AnyEvent]:
    out: list[ev.AnyEvent] = [_cancel(campaign, r, code, reason, now) for r in campaign.reservations.values()]
    out.append(dv.DefragEnded(at=now, campaign_id=campaign.campaign_id, pool=campaign.pool, code=end,
                              completed=campaign.completed, cancelled=campaign.cancelled + len(out), reason=reason))
    return out


def decide_cancel(state: ClusterState, intent: dv.CancelDefrag, now: datetime) -> list[ev.AnyEvent]:
    """CancelDefrag -> MoveCancelled(cancelled) per open move + DefragEnded(cancelled), or
    IntentRejected (field ``pool``) when no campaign runs there."""
    campaign = running(state, intent.pool)
    if campaign is None:
        return _rejected(intent, "cancel_defrag", "pool", intent.pool,
                         f"no defrag campaign is running in pool {intent.pool}", now)
    return _end(campaign, "cancelled", "cancelled", intent.reason or "cancelled by an operator", now)


def decide_cancel_move(state: ClusterState, intent: dv.CancelMove, now: datetime) -> list[ev.AnyEvent]:
    """CancelMove -> MoveCancelled (+ DefragEnded when it was the last open move), or IntentRejected:
    an unknown code (field ``code``), no running campaign of that id (``campaign_id``), no open move
    of that allocation (``allocation_id``: it completed or was cancelled already)."""
    tag = "cancel_move"
    if intent.code not in CANCEL_MOVE_CODES:
        return _rejected(intent, tag, "code", intent.code,
                         f"code must be one of {', '.join(CANCEL_MOVE_CODES)}, got {intent.code!r}", now)
    campaign = next((c for c in state.campaigns.values() if c.campaign_id == intent.campaign_id and c.running), None)
    if campaign is None:
        return _rejected(intent, tag, "campaign_id", intent.campaign_id,
                         f"no running defrag campaign {intent.campaign_id}", now)
    r = campaign.reservations.get(intent.allocation_id)
    if r is None:
        return _rejected(intent, tag, "allocation_id", intent.allocation_id,
                         f"campaign {intent.campaign_id} has no open move of allocation {intent.allocation_id}", now)
    code: dv.MoveCancelCode = "eviction_refused" if intent.code == "eviction_refused" else "source_gone"
    return [_cancel(campaign, r, code, intent.reason or code.replace("_", " "), now),
            *_ended_if_last(campaign, completing=0, cancelling=1, now=now)]


_SHAPE = ("namespace", "pool", "request", "limit", "gpu_count", "qos", "isolation", "gpu_models", "vendor",
          "gpu_indices", "node_affinity", "cpu_milli", "memory_bytes", "partition_template", "priority", "gang")
"""The AllocationSpec fields a replacement must share with the moved allocation."""


def same_shape(moved: AllocationSpec, spec: AllocationSpec) -> bool:
    """Whether ``spec`` asks exactly what ``moved`` holds (every field of :data:`_SHAPE`), for the
    same non-empty workload."""
    return bool(moved.workload) and moved.workload == spec.workload and all(
        getattr(moved, f) == getattr(spec, f) for f in _SHAPE)


def reserved_for(state: ClusterState, spec: AllocationSpec) -> tuple[Campaign, Reservation] | None:
    """The open move whose reserved GPUs ``spec`` (a new request) takes, or None (rules: module docstring)."""
    campaign = running(state, spec.pool)
    if campaign is None or spec.allocation_id in state.allocations:
        return None
    for r in campaign.reservations.values():
        node = state.nodes.get(r.target_node)
        if (r.allocation_id != spec.allocation_id and same_shape(r.spec, spec) and node is not None
                and node.phase == READY and all(g in state.gpus for g in r.target_gpus)):
            return campaign, r
    return None


def replacement(state: ClusterState, spec: AllocationSpec, now: datetime) -> list[ev.AnyEvent] | None:
    """MoveCompleted + AllocationGranted of ``spec`` on the reserved GPUs (+ DefragEnded when it
    was the last open move), or None when no open move is reserved for it."""
    found = reserved_for(state, spec)
    if found is None:
        return None
    campaign, r = found
    out: list[ev.AnyEvent] = [
        dv.MoveCompleted(at=now, campaign_id=campaign.campaign_id, pool=campaign.pool, allocation_id=r.allocation_id,
                         replacement_id=spec.allocation_id, replacement_pod=spec.pod, node=r.target_node,
                         gpus=tuple(r.target_gpus)),
        ev.AllocationGranted(at=now, spec=spec, node=r.target_node, gpus=tuple(r.target_gpus),
                             charges=tuple(r.charges), partitions=tuple(r.partitions)),
    ]
    return out + _ended_if_last(campaign, completing=1, cancelling=0, now=now)


def _stale(state: ClusterState, r: Reservation, now: datetime) -> tuple[dv.MoveCancelCode, str] | None:
    if r.expires_at <= now:
        return "expired", f"the reservation expired at {r.expires_at.isoformat()}"
    node = state.nodes.get(r.target_node)
    if node is None or node.phase != READY or any(g not in state.gpus for g in r.target_gpus):
        return "node_gone", f"target node {r.target_node} is {'gone' if node is None else node.phase}"
    return None


def expire(state: ClusterState, now: datetime) -> list[ev.AnyEvent]:
    """The campaigns' deadline and expiry events at ``now`` (decided with CheckHeartbeats): per
    campaign past its deadline, MoveCancelled(deadline) per open move and DefragEnded(deadline);
    else MoveCancelled per reservation expired or whose target left (+ DefragEnded when none is left)."""
    out: list[ev.AnyEvent] = []
    for pool in sorted(state.campaigns):
        campaign = state.campaigns[pool]
        if not campaign.running:
            continue
        if campaign.deadline <= now:
            out += _end(campaign, "deadline", "deadline", f"the deadline {campaign.deadline.isoformat()} passed", now)
            continue
        stale = [(r, why) for r in campaign.reservations.values() if (why := _stale(state, r, now)) is not None]
        out += [_cancel(campaign, r, why[0], why[1], now) for r, why in stale]
        if stale:
            out += _ended_if_last(campaign, completing=0, cancelling=len(stale), now=now)
    return out


def due(state: ClusterState, now: datetime) -> bool:
    """Whether :func:`expire` has something to decide at ``now`` (the loop then publishes CheckHeartbeats)."""
    for campaign in state.campaigns.values():
        if campaign.running and (campaign.deadline <= now or any(
                _stale(state, r, now) is not None for r in campaign.reservations.values())):
            return True
    return False


def scheduled(state: ClusterState, now: datetime) -> list[dv.StartDefrag]:
    """The StartDefrag intents the pools' schedules ask for at ``now`` (rule: module docstring), by pool."""
    out: list[dv.StartDefrag] = []
    for pool in sorted(state.pools):
        schedule = state.pools[pool].defrag
        if schedule is None or not schedule.enabled or pool not in state.pool_nodes or running(state, pool):
            continue
        tick = latest_tick(schedule, now)
        last = state.campaigns.get(pool)
        if tick is None or (last is not None and last.started_at >= tick):
            continue
        left = schedule.max_duration_s - int((now - tick).total_seconds())
        out.append(dv.StartDefrag(intent_id=f"defrag-schedule-{pool}-{tick.strftime('%Y%m%dT%H%M%SZ')}", pool=pool,
                                  max_moves=min(schedule.max_moves, dv.MAX_DEFRAG_MOVES),
                                  max_share_of_namespace_pct=schedule.max_share_of_namespace_pct,
                                  max_duration_s=max(1, left), trigger="schedule"))
    return out
