"""Gang rules: members wait holding nothing until the quorum is present, then one decision places
the whole quorum or none of it; timeouts; a placed gang falling below its quorum is reported.

TensorFusion (internal/gang/manager.go, kube-scheduler coscheduling) lets members Reserve GPUs
and wait at Permit until the quorum is there, so half-admitted gangs hold shadow reservations and
can starve each other. Here a member of a gang that has not been placed is queued with code
``gang`` and holds nothing; when the quorum-th member arrives (or capacity frees while the quorum
waits) :func:`services.allocator.domain.gang_place.place` tries the quorum on a hypothetical
state, and the decision emits an AllocationGranted per member plus :class:`GangPlaced`, or
nothing but the arriving member's AllocationQueued naming which member cannot fit where. Once a
member holds GPUs the gang is *formed* and later members are ordinary requests. A gang that has
not been placed ``timeout_s`` after its first waiting member arrived leaves the queue
(:class:`GangTimedOut`); a release that leaves a formed gang below its quorum adds
:class:`GangDegraded`. Rules: docs/allocation.md ("Gangs").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from events import decisions as ev
from events.bounds import MAX_GANG_MEMBERS
from events.values import AllocationSpec, GangSpec
from services.allocator.domain.allocate import never_fits
from services.allocator.domain.evolve import evolve
from services.allocator.domain.gang_index import GangMembers
from services.allocator.domain.gang_place import Failed, Placed, place
from services.allocator.domain.model import GRANTED
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

GANG = "gang"
"""The ``code`` of a member waiting for its gang (AllocationQueued, current reasons)."""


class Hints(Protocol):
    """Where a drain looks (services.allocator.domain.process.Hints): nodes, namespaces, pools."""

    nodes: set[str]
    namespaces: set[str]
    pools: set[str]


def presence(gang: GangSpec, present: int) -> str:
    """``gang team-a/trainer: 5 of 8 members present, quorum 8``."""
    return f"gang {gang.key}: {present} of {gang.desired} members present, quorum {gang.quorum}"


def _any_member(state: ClusterState, members: GangMembers | None) -> AllocationSpec | None:
    if members is None:
        return None
    aid = next(iter(members.queued), None) or min(members.granted, default=None)
    return None if aid is None else state.allocations[aid].spec


def check_gang(state: ClusterState, spec: AllocationSpec) -> tuple[str, str, str] | None:
    """``(field, value, reason)`` when ``spec.gang`` is invalid (TensorFusion validateGang: quorum
    >= 2 and <= desired) or disagrees with the gang's existing members; else None."""
    gang = spec.gang
    if gang is None:
        return None
    if not gang.key:
        return "spec.gang.key", "", "spec.gang.key must not be empty"
    if not 2 <= gang.quorum <= gang.desired:
        return "spec.gang.quorum", str(gang.quorum), (
            f"gang {gang.key}: quorum {gang.quorum} must be >= 2 and <= desired members {gang.desired}")
    if gang.desired > MAX_GANG_MEMBERS:
        return "spec.gang.desired", str(gang.desired), (
            f"gang {gang.key}: desired members {gang.desired} above the bound {MAX_GANG_MEMBERS}")
    if gang.timeout_s < 0:
        return "spec.gang.timeout_s", str(gang.timeout_s), "spec.gang.timeout_s must not be negative"
    other = _any_member(state, state.gangs.get(gang.key))
    if other is not None and other.gang != gang:
        return "spec.gang", gang.key, (
            f"gang {gang.key} is {other.gang!r} (set by member {other.allocation_id}); this member says {gang!r}")
    return None


def _waiting(state: ClusterState, key: str, extra: AllocationSpec | None = None) -> list[AllocationSpec]:
    members = state.gangs.get(key)
    out = [state.allocations[aid].spec for aid in members.queued] if members is not None else []
    if extra is not None and all(s.allocation_id != extra.allocation_id for s in out):
        out.append(extra)
    return out


def _placed_events(placed: Placed, gang: GangSpec) -> list[ev.AnyEvent]:
    grants = placed.grants
    first = grants[0]
    summary = ev.GangPlaced(at=first.at, key=gang.key, namespace=first.spec.namespace, pool=first.spec.pool,
                            quorum=gang.quorum, placed=len(grants), nodes=tuple(sorted({g.node for g in grants})))
    return [*placed.events, summary]


def decide_member(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: Scheduler
                  ) -> list[ev.AnyEvent] | None:
    """A gang member's request (after the ordinary identity, pool and per-workload cap checks):
    rejected when its gang is invalid or it can never fit; queued holding nothing below the
    quorum; the quorum placed (all grants and a GangPlaced) or the member queued with the reason
    the quorum does not fit. None: not a member of an unplaced gang (decide it as any request)."""
    gang = spec.gang
    if gang is None:
        return None
    problem = check_gang(state, spec)
    if problem is not None:
        field, _, reason = problem
        return [ev.AllocationRejected(at=now, spec=spec, reason=reason, code="invalid", field=field)]
    members = state.gangs.get(gang.key)
    if members is not None and members.formed:
        return None
    if not scheduler.static_fits(state, spec):
        static_filters = scheduler.static_pass(state, spec)[0]
        return [ev.AllocationRejected(at=now, spec=spec, code="unschedulable", filters=tuple(static_filters),
                                      reason=never_fits(state, spec, static_filters, scheduler))]
    waiting = _waiting(state, gang.key, spec)
    if len(waiting) < gang.quorum:
        return [ev.AllocationQueued(at=now, spec=spec, code=GANG, reason=presence(gang, len(waiting)))]
    outcome = place(state, waiting, gang.quorum, scheduler, now, arriving=spec.allocation_id)
    if isinstance(outcome, Failed):
        dimension = outcome.blocked.quota.dimension if outcome.blocked.quota else ""
        reason = f"{presence(gang, len(waiting))}; {outcome.describe()}"
        return [ev.AllocationQueued(at=now, spec=spec, code=GANG, reason=reason, quota_dimension=dimension)]
    events = _placed_events(outcome, gang)
    for member, blocked in outcome.left:
        if member.allocation_id == spec.allocation_id:
            reason = f"gang {gang.key} was placed; this member beyond its quorum waits: {blocked.reason}"
            events.append(ev.AllocationQueued(at=now, spec=spec, code=blocked.code, reason=reason))
    return events


def unplaced(state: ClusterState, spec: AllocationSpec) -> bool:
    """True when ``spec`` is a member of a gang that has not been placed (its quorum waits)."""
    if spec.gang is None:
        return False
    members = state.gangs.get(spec.gang.key)
    return members is None or not members.formed


def _concerns(state: ClusterState, waiting: list[AllocationSpec], hints: Hints) -> bool:
    pools = {s.pool for s in waiting}
    if pools & hints.pools or {s.namespace for s in waiting} & hints.namespaces:
        return True
    return any(n in state.nodes and state.nodes[n].pool in pools for n in hints.nodes)


def retry(state: ClusterState, gang: GangSpec, hints: Hints, now: datetime, scheduler: Scheduler
          ) -> list[ev.AnyEvent]:
    """During a queue drain: place gang ``gang`` when its quorum is present and ``hints`` say
    something it needs may have freed; the events are folded into ``state`` as they are made (the
    nodes of preempted victims join ``hints``)."""
    waiting = _waiting(state, gang.key)
    if len(waiting) < gang.quorum or not _concerns(state, waiting, hints):
        return []
    outcome = place(state, waiting, gang.quorum, scheduler, now)
    if isinstance(outcome, Failed):
        return []
    events = _placed_events(outcome, gang)
    for event in events:
        evolve(state, event)
        if isinstance(event, ev.AllocationPreempted):
            hints.nodes.add(event.node)  # what a victim held beyond the member's need may serve others
    return events


def expired(state: ClusterState, now: datetime) -> list[str]:
    """Keys of unplaced gangs whose timeout ran out at ``now`` (from the first waiting member's
    arrival), sorted."""
    out = []
    for key, members in state.gangs:
        if members.formed or not members.queued:
            continue
        first = state.allocations[next(iter(members.queued))]
        timeout = first.spec.gang.timeout_s if first.spec.gang else 0
        if timeout and first.requested_at + timedelta(seconds=timeout) <= now:
            out.append(key)
    return sorted(out)


def time_out(state: ClusterState, now: datetime) -> list[ev.AnyEvent]:
    """For each expired gang: a GangTimedOut and an AllocationReleased (``was_queued``) per waiting
    member, with the reason (TensorFusion rejects the waiting members at Permit on timeout)."""
    out: list[ev.AnyEvent] = []
    for key in expired(state, now):
        waiting = _waiting(state, key)
        gang = waiting[0].gang
        assert gang is not None
        reason = f"gang {key} timed out after {gang.timeout_s} s: {len(waiting)} of {gang.desired} members " \
                 f"present, quorum {gang.quorum}"
        out.append(ev.GangTimedOut(at=now, key=key, namespace=waiting[0].namespace, quorum=gang.quorum,
                                   present=len(waiting), timeout_s=gang.timeout_s, reason=reason,
                                   waiting=tuple(s.allocation_id for s in waiting)))
        out.extend(ev.AllocationReleased(at=now, allocation_id=s.allocation_id, namespace=s.namespace, pod=s.pod,
                                         pool=s.pool, was_queued=True, reason=reason) for s in waiting)
    return out


def with_degraded(state: ClusterState, events: Sequence[ev.AnyEvent], now: datetime) -> list[ev.AnyEvent]:
    """``events`` with a GangDegraded after each release or preemption of a granted gang member
    that leaves its gang below the quorum (``state``: before ``events``)."""
    out: list[ev.AnyEvent] = []
    left: dict[str, int] = {}
    for event in events:
        out.append(event)
        if not isinstance(event, ev.AllocationReleased | ev.AllocationPreempted):
            continue
        allocation = state.allocations.get(event.allocation_id)
        if allocation is None or allocation.status != GRANTED or allocation.spec.gang is None:
            continue
        gang = allocation.spec.gang
        members = state.gangs.get(gang.key)
        count = left.get(gang.key, len(members.granted) if members else 1) - 1
        left[gang.key] = count
        if count < gang.quorum:
            out.append(ev.GangDegraded(at=now, key=gang.key, namespace=allocation.spec.namespace,
                                       allocation_id=event.allocation_id, members=count, quorum=gang.quorum))
    return out


def explain(state: ClusterState, spec: AllocationSpec, scheduler: Scheduler | None = None
            ) -> tuple[str, str, str] | None:
    """``(code, reason, quota_dimension)`` of a waiting member of an unplaced gang now: below the
    quorum, the presence; with the quorum, ``fits`` or which member cannot fit where. None when
    ``spec`` is not such a member (explain it as any request). Without a ``scheduler`` a fresh
    one is built (one-off use)."""
    gang = spec.gang
    if gang is None or not unplaced(state, spec):
        return None
    waiting = _waiting(state, gang.key, spec)
    if len(waiting) < gang.quorum:
        return GANG, presence(gang, len(waiting)), ""
    outcome = place(state, waiting, gang.quorum, scheduler or Scheduler(), _EPOCH)
    if isinstance(outcome, Failed):
        dimension = outcome.blocked.quota.dimension if outcome.blocked.quota else ""
        return GANG, f"{presence(gang, len(waiting))}; {outcome.describe()}", dimension
    nodes = sorted({g.node for g in outcome.grants})
    return "fits", (f"{presence(gang, len(waiting))}; the quorum fits now on {', '.join(nodes)}; "
                    "placed at the next queue drain"), ""
