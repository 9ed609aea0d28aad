"""process(state, intent, now): decide, fold the events in, then grant queued requests that now fit.

The queue is best-effort FIFO within priority (QoS critical > high > medium > low, then arrival):
each queued request is tried in that order and granted if it fits, so a large request does not
block smaller ones behind it. A queued request is only retried where something it needs may have
freed: the nodes whose capacity, liveness or labels changed, or everywhere when its namespace's
quota usage or spec changed or its pool was reconfigured (it fit nowhere else when it was queued,
and capacity elsewhere can only shrink without an event naming that node). A gang that has not
been placed is tried as a unit where its first waiting member stands (domain.gang.retry: the
whole quorum or nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from events import decisions as ev
from events.intents import AnyIntent
from events.values import priority_of
from services.allocator.domain import gang
from services.allocator.domain.allocate import attempt, granted
from services.allocator.domain.decide import decide
from services.allocator.domain.evolve import evolve
from services.allocator.domain.filters.liveness import READY
from services.allocator.domain.model import QUEUED
from services.allocator.domain.need import ShapeKey, shape_key
from services.allocator.domain.placement import Grant
from services.allocator.domain.preempting import try_preempt
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState


class Hints:
    """What an applied batch of events may have freed: nodes, namespaces (quota), pools."""

    __slots__ = ("namespaces", "nodes", "pools")

    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self.namespaces: set[str] = set()
        self.pools: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.nodes or self.namespaces or self.pools)


def hints_of(state: ClusterState, events: Sequence[ev.AnyEvent]) -> Hints:
    """Collect where capacity or quota may have grown because of ``events``."""
    hints = Hints()
    for e in events:
        match e:
            case ev.AllocationPreempted():
                hints.nodes.add(e.node)
                if e.namespace in state.quotas:
                    hints.namespaces.add(e.namespace)
            case ev.AllocationReleased(was_queued=False) | ev.AllocationResized():
                if isinstance(e, ev.AllocationReleased):
                    hints.nodes.add(e.node)
                elif e.allocation_id in state.allocations:
                    hints.nodes.add(state.allocations[e.allocation_id].node)
                if e.namespace in state.quotas:
                    hints.namespaces.add(e.namespace)
            case ev.NodeRegistered() | ev.GpuCapacityChanged() | ev.GpuPhaseChanged():
                hints.nodes.add(e.node)
            case ev.NodePhaseChanged(phase=phase) if phase == READY:
                hints.nodes.add(e.node)
            case ev.QuotaSet() | ev.QuotaRemoved():
                hints.namespaces.add(e.namespace)
            case ev.PoolConfigured():
                hints.pools.add(e.pool)
    return hints


def drain(state: ClusterState, hints: Hints, now: datetime, scheduler: Scheduler) -> list[ev.AnyEvent]:
    """Grant, in queue order, every queued request that fits where ``hints`` say things changed;
    a retried request that does not fit may preempt (domain/preempting.py) anywhere in its pool.

    A request shape that found no room is not tried again in the same drain (grants only take
    capacity away), nor is a preemption that found no plan retried for the same shape, priority
    and namespace; a preemption frees what its plan does not use, so both memos then start over.
    """
    out: list[ev.AnyEvent] = []
    no_room: set[tuple[ShapeKey, bool]] = set()
    gangs: set[str] = set()
    no_plan: set[tuple[ShapeKey, int, str]] = set()
    for allocation_id in list(state.queue):
        allocation = state.allocations.get(allocation_id)
        if allocation is None or allocation.status != QUEUED:
            continue
        spec = allocation.spec
        if spec.gang is not None and gang.unplaced(state, spec):
            if spec.gang.key not in gangs:  # a gang is tried once, where its first member waits
                gangs.add(spec.gang.key)
                out.extend(gang.retry(state, spec.gang, hints, now, scheduler))
            continue
        restrict: list[str] | None = None
        may_fit = True
        if spec.pool not in hints.pools and spec.namespace not in hints.namespaces:
            restrict = [n for n in hints.nodes if n in state.nodes and state.nodes[n].pool == spec.pool]
            if not restrict:
                continue
            scheduler.sync(state)
            need = scheduler.prepare(spec)[0]
            may_fit = any(scheduler.may_fit(n, need) for n in restrict)
        shape = shape_key(spec)
        if may_fit and (shape, True) not in no_room and (shape, restrict is None) not in no_room:
            outcome = attempt(state, spec, scheduler, restrict=restrict)
            if isinstance(outcome, Grant):
                event = granted(spec, outcome, now=now, from_queue=True)
                evolve(state, event)
                out.append(event)
                continue
            if outcome.code == "capacity":
                no_room.add((shape, restrict is None))
        tried = (shape, priority_of(spec), spec.namespace)
        if tried in no_plan:
            continue
        preempting = try_preempt(state, spec, now, scheduler, from_queue=True)
        if isinstance(preempting, list):
            for change in preempting:
                evolve(state, change)
            out.extend(preempting)
            hints.nodes.add(preempting[-1].node)  # type: ignore[union-attr]
            no_room.clear()
            no_plan.clear()
        else:
            no_plan.add(tried)
    return out


def process(state: ClusterState, intent: AnyIntent, now: datetime, scheduler: Scheduler | None = None
            ) -> list[ev.AnyEvent]:
    """Decide ``intent``, apply its events to ``state`` and drain the queue; returns every event
    (the intent's own first, then grants from the queue) in the order they were applied.

    ``scheduler``: the caller's long-lived Scheduler (a fresh one when None: one-off use only,
    it indexes the whole state). Bind it once, e.g. ``functools.partial(process, scheduler=s)``.
    """
    scheduler = scheduler or Scheduler()
    events = decide(state, intent, now, scheduler)
    for event in events:
        evolve(state, event)
    if len(state.queue):
        hints = hints_of(state, events)
        if hints:
            events.extend(drain(state, hints, now, scheduler))
    return events
