"""Deciding with preemption: the events of a plan, and the try made for a request that fits nowhere.

One decision records the whole preemption (issue 16's one-step design, no reservation): an
AllocationPreempted per victim (who, for whom, both priorities, why), then the preemptor's
AllocationGranted naming the victims in ``preempted``. ``evolve`` folds each AllocationPreempted
exactly like a release, so when the grant is folded the GPUs it was planned on are as free as the
plan's dry run saw them; replay reproduces it from the log alone. Who may preempt: a new request
when it arrives, and a queued request when the queue drain retries it (domain/process.py). A
request that can never fit (static pass) never preempts anything.
"""

from __future__ import annotations

from datetime import datetime

from events import decisions as ev
from events.values import AllocationSpec, priority_of
from services.allocator.domain.preemption import NoPlan, find
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.victim_choice import Plan


def plan_events(spec: AllocationSpec, plan: Plan, now: datetime, *, from_queue: bool) -> list[ev.AnyEvent]:
    """AllocationPreempted for each victim (lowest priority first), then the AllocationGranted."""
    priority = priority_of(spec)
    out: list[ev.AnyEvent] = []
    for victim in plan.victims:
        vspec = victim.spec
        vprio = priority_of(vspec)
        out.append(ev.AllocationPreempted(
            at=now, allocation_id=vspec.allocation_id, namespace=vspec.namespace, pod=vspec.pod, pool=vspec.pool,
            node=victim.node, gpus=tuple(victim.gpus), preemptor=spec.allocation_id,
            preemptor_namespace=spec.namespace, preemptor_pod=spec.pod, priority=vprio, preemptor_priority=priority,
            reason=(f"preempted by {spec.namespace}/{spec.pod} (priority {priority} > {vprio}) "
                    f"to fit on {plan.node} ({', '.join(plan.gpus)})"),
        ))
    out.append(ev.AllocationGranted(
        at=now, spec=spec, node=plan.node, gpus=plan.gpus, charges=plan.charges, from_queue=from_queue,
        preempted=tuple(v.spec.allocation_id for v in plan.victims), partitions=plan.partitions))
    return out


def try_preempt(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler, *,
                from_queue: bool) -> list[ev.AnyEvent] | NoPlan:
    """The events of the best plan for ``spec`` (which fits nowhere now), or why there is none.
    A request that could never fit in its pool finds no plan (the dry run runs every filter); the
    caller rejects it (static pass)."""
    found = find(state, spec, now, scheduler)
    if isinstance(found, NoPlan):
        return found
    return plan_events(spec, found, now, from_queue=from_queue)


def may_preempt(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler) -> bool:
    """False exactly when :func:`find` refuses ``spec`` before any search (codes ``off`` and
    ``priority``): preemption is off in its pool, or no granted allocation there has a priority
    below ``spec``'s (the Scheduler's pool floor). O(1); a queue drain asks it before each try so
    that the many queued requests of the pool's lowest priority cost no search at all."""
    if state.pool_config(spec.pool).preemption == "off":
        return False
    floor = scheduler.pool_floor(state, spec.pool)
    return floor is not None and floor < priority_of(spec)


def preemption_plan(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler | None = None
                    ) -> Plan | NoPlan:
    """The plan ``spec`` would get at ``now`` if it fit nowhere (victims, node, GPUs), or why there
    is none; for explanations (``why``, ``simulate``). Never mutates ``state``; without a
    ``scheduler`` a fresh one is built (one-off use)."""
    scheduler = scheduler or Scheduler()
    if not scheduler.static_fits(state, spec):
        return NoPlan("never", f"can never fit in pool {spec.pool}")
    return find(state, spec, now, scheduler)


def explained(reason: str, no_plan: NoPlan, *, blocked_by: str) -> str:
    """A queued request's reason with why preemption did not help, when nodes were the block
    (``blocked_by`` is the Blocked code ``capacity``; a ``quota`` block is about the namespace, and
    the note, which is about nodes, would mislead) and lower-priority work was there to consider
    (codes ``candidates`` and ``fit``); unchanged otherwise."""
    if blocked_by == "capacity" and no_plan.code in ("candidates", "fit"):
        return f"{reason}; no preemption: {no_plan.reason}"
    return reason
