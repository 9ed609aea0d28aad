"""Deciding RequestAllocation and ReleaseAllocation, and ``attempt``: the admission of one request.

A request is rejected when it is invalid, names an unknown pool, breaks a per-workload quota
cap, or could never fit the pool's inventory even if it were empty (a static filter pass);
granted when it fits now; queued otherwise, with the filter counts and quota check that
blocked it (TensorFusion FilterDetail, so "why is my pod waiting" has an answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from events import decisions as ev
from events.intents import ReleaseAllocation, RequestAllocation
from events.values import AllocationSpec, FilterCount
from services.allocator.domain import borrowing, partition, reclaim
from services.allocator.domain.model import QuotaUsage
from services.allocator.domain.partition_explain import describe
from services.allocator.domain.placement import Blocked, Grant, charge_on, exact_quota, lower_bound_usage, usage_on
from services.allocator.domain.preempting import explained
from services.allocator.domain.preemption import NoPlan
from services.allocator.domain.quota import check_single, check_totals
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.validation import check_spec


def attempt(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler, *,
            restrict: Iterable[str] | None = None) -> Grant | Blocked:
    """Admit ``spec`` now if it fits (quota, filters, strategy, exact quota, and in a pool with
    shares its share's borrowing: domain/borrowing.py); never mutates ``state``."""
    outcome = _attempt(state, spec, scheduler, restrict)
    if state.share_index.terms and isinstance(outcome, Grant) and state.share_index.has_shares(spec.pool):
        return borrowing.judged(state, spec, outcome)
    return outcome


def _attempt(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler, restrict: Iterable[str] | None
             ) -> Grant | Blocked:
    quota = state.quotas.get(spec.namespace)
    usage = state.usage.get(spec.namespace) or QuotaUsage()
    partitioned = spec.isolation == "partitioned"
    if quota is not None:
        lower = partition.lower_bound(spec) if partitioned else lower_bound_usage(spec)
        block = check_totals(quota, spec.namespace, usage=usage, add=lower)
        if block is not None:
            return Blocked("quota", block.reason, block)
    found = scheduler.find(state, spec, restrict=restrict)
    if found is None:
        return Blocked("capacity", f"no node in pool {spec.pool} has {spec.gpu_count} GPU(s) that fit")
    node, gpus = found
    if partitioned:
        return partition.grant(spec, node.name, gpus, scheduler.prepare(spec)[0], scheduler.profile.templates,
                               quota, usage)
    add = usage_on(gpus, spec)
    if quota is not None:
        block = exact_quota(quota, spec, gpus, usage, add)
        if block is not None:
            return Blocked("quota", block.reason, block)
    charges = tuple(charge_on(g, spec) for g in gpus)
    return Grant(node.name, tuple(g.spec.name for g in gpus), charges, add)


def explain(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler | None = None) -> list[FilterCount]:
    """How many of the pool's GPUs each filter removes for ``spec`` now (for simulate and status).
    Without a ``scheduler`` a fresh one is built (one-off use)."""
    return (scheduler or Scheduler()).filter_pass(state, spec)[0]


def summarize(filters: list[FilterCount], total: int, pool: str) -> str:
    """kube-scheduler style: ``0/8 GPUs fit in pool p: ResourceFilter removed 6, SameNodeFilter removed 2``."""
    parts = [f"{f.name} removed {f.removed}" for f in filters if f.removed]
    return f"0/{total} GPUs fit in pool {pool}: " + (", ".join(parts) or "no candidates")


def never_fits(state: ClusterState, spec: AllocationSpec, static_filters: list[FilterCount],
               scheduler: Scheduler) -> str:
    """The reason of a request no GPU of its pool can ever hold: the filter counts, then what the
    request asked of a filter that removed GPUs for a property they cannot change (the GPU models
    asked and those the pool has; the partition template, docs/partitions.md)."""
    reason = "can never fit: " + summarize(static_filters, sum(f.removed for f in static_filters), spec.pool)
    if spec.gpu_models and any(f.name == "GPUModelFilter" and f.removed for f in static_filters):
        have = sorted({state.gpus[g].spec.model for n in state.pool_nodes.get(spec.pool, ())
                       for g in state.nodes[n].gpus})
        reason += (f"; GPU models asked: {', '.join(spec.gpu_models)}; pool {spec.pool} has: "
                   f"{', '.join(have) or 'no GPUs'} (exact names, as `gpuledger nodes show` lists them)")
    if spec.isolation == "partitioned":
        reason += "; " + describe(state, spec, scheduler.prepare(spec)[0], scheduler.profile.templates)
    return reason


def granted(spec: AllocationSpec, grant: Grant, *, now: datetime, from_queue: bool) -> ev.AllocationGranted:
    """The event for a successful attempt."""
    return ev.AllocationGranted(
        at=now, spec=spec, node=grant.node, gpus=grant.gpus, charges=grant.charges, from_queue=from_queue,
        partitions=grant.partitions, share=grant.share, borrowed=grant.borrowed,
    )


GangRule = Callable[[ClusterState, AllocationSpec, datetime, Scheduler], "list[ev.AnyEvent] | None"]
"""Decides a gang member's request (services.allocator.domain.gang.decide_member); None: as any request."""


def decide_request(state: ClusterState, intent: RequestAllocation, now: datetime, scheduler: Scheduler,
                   gang: GangRule | None = None) -> list[ev.AnyEvent]:
    """RequestAllocation -> AllocationGranted | AllocationQueued | AllocationRejected | IntentRejected.

    ``gang`` decides a gang member after the identity, pool and per-workload cap checks."""
    spec = intent.spec
    existing = state.allocations.get(spec.allocation_id)
    if existing is not None:  # first: an AllocationRejected of a live id would read as that allocation's end
        return [ev.IntentRejected(
            at=now, intent_id=intent.intent_id, intent_type="request_allocation", field="spec.allocation_id",
            value=spec.allocation_id, reason=f"allocation {spec.allocation_id} already exists ({existing.status})",
        )]
    problem = check_spec(spec)
    if problem:
        field, _, reason = problem
        return [ev.AllocationRejected(at=now, spec=spec, reason=reason, code="invalid", field=field)]
    if spec.pool not in state.pool_nodes and spec.pool not in state.pools:
        return [ev.AllocationRejected(
            at=now, spec=spec, code="unknown_pool", field="spec.pool", reason=f"no gpu devices in pool {spec.pool}")]
    quota = state.quotas.get(spec.namespace)
    cap_block = quota and check_single(quota, spec.namespace, request=spec.request, limit=spec.limit,
                                       count=spec.gpu_count)
    if cap_block:
        return [ev.AllocationRejected(at=now, spec=spec, code="quota", reason=cap_block.reason,
                                      quota_dimension=cap_block.dimension)]
    member = gang(state, spec, now, scheduler) if gang is not None and spec.gang is not None else None
    if member is not None:
        return member
    outcome = attempt(state, spec, scheduler)
    if isinstance(outcome, Grant):
        return [granted(spec, outcome, now=now, from_queue=False)]
    preempting = reclaim.try_take(state, spec, now, scheduler, from_queue=False)
    if isinstance(preempting, list):
        return preempting
    return [_not_now(state, spec, outcome, now, scheduler, preempting)]


def no_room(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler) -> tuple[str, list[FilterCount]]:
    """Why ``spec`` fits on no node now, and the per-filter counts when they are asked for.

    The text says what the failed search knows, from the pool's summaries, without running a
    filter again (docs/allocation.md): ``0/8 GPUs fit in pool p: no node has 2 GPU(s) that pass
    every filter (largest free on one GPU: 12.5 TFLOPS, 30 GiB VRAM; most idle GPUs on a node: 0)``.
    The counts (TensorFusion FilterDetail: GPUs each filter removes) only on the read side
    (``scheduler.explaining``: ``why``, the queue, the dashboard, ``simulate``); the writer's hot
    path leaves them out (empty)."""
    room = scheduler.room(state, spec.pool)
    text = (f"0/{room.gpus} GPUs fit in pool {spec.pool}: no node has {spec.gpu_count} GPU(s) that pass every "
            f"filter (largest free on one GPU: {_tflops(room.milli_tflops)} TFLOPS, {_gib(room.vram_bytes)} "
            f"VRAM; most idle GPUs on a node: {room.idle})")
    return text, scheduler.filter_pass(state, spec)[0] if scheduler.explaining else []


def _tflops(milli: int) -> str:
    return f"{milli / 1000:.1f}".removesuffix(".0")


def _gib(amount: int) -> str:
    return f"{amount / (1 << 30):.1f}".removesuffix(".0") + " GiB"


def _not_now(state: ClusterState, spec: AllocationSpec, blocked: Blocked, now: datetime, scheduler: Scheduler,
             no_plan: NoPlan) -> ev.AnyEvent:
    filters: list[FilterCount] = []
    if blocked.code == "capacity":
        if not scheduler.static_fits(state, spec):
            static_filters = scheduler.static_pass(state, spec)[0]
            reason = never_fits(state, spec, static_filters, scheduler)
            return ev.AllocationRejected(at=now, spec=spec, code="unschedulable", reason=reason,
                                         filters=tuple(static_filters))
        reason, filters = no_room(state, spec, scheduler)
        if spec.isolation == "partitioned":
            reason += "; " + describe(state, spec, scheduler.prepare(spec)[0], scheduler.profile.templates)
    else:
        reason = blocked.reason
        if scheduler.explaining:
            filters = scheduler.filter_pass(state, spec)[0]
    dimension = blocked.quota.dimension if blocked.quota else ""
    reason = explained(reason, no_plan, blocked_by=blocked.code)
    return ev.AllocationQueued(at=now, spec=spec, code=blocked.code, reason=reason, filters=tuple(filters),
                               quota_dimension=dimension)


def decide_release(state: ClusterState, intent: ReleaseAllocation, now: datetime) -> list[ev.AnyEvent]:
    """ReleaseAllocation -> AllocationReleased (granted or queued) | IntentRejected (not live).

    A second release of the same allocation is answered with IntentRejected and changes
    nothing, so a double release can never credit capacity twice (TensorFusion #218).
    """
    allocation = state.allocations.get(intent.allocation_id)
    if allocation is None:
        return [ev.IntentRejected(
            at=now, intent_id=intent.intent_id, intent_type="release_allocation", field="allocation_id",
            value=intent.allocation_id,
            reason=f"allocation {intent.allocation_id} is not live (unknown or already released)",
        )]
    spec = allocation.spec
    return [ev.AllocationReleased(
        at=now, allocation_id=spec.allocation_id, namespace=spec.namespace, pod=spec.pod, pool=spec.pool,
        node=allocation.node, gpus=tuple(allocation.gpus), was_queued=allocation.status != "granted",
        reason=intent.reason,
    )]
