"""The current reason of a queued request: why it waits NOW, not when it was queued.

The only module of the API, the read-model reason keeper and ``replay --verify`` that calls the
domain to explain a request, so a change in the domain's public functions is adapted here once.
A queued request's reason is computed by deciding its spec again against the projection under a
probe allocation id (``decide`` never mutates the state) with an explaining Scheduler
(:func:`explainer`): the outcome the domain would give it now (queued: the per-filter counts,
which the writer leaves out of the AllocationQueued event, or the quota dimension; granted: it
fits now and is granted at the next queue drain; rejected: it can never fit any more).
Deterministic: the same state gives the same reason (no clock is read by the filters), so
``replay --verify`` recomputes exactly what the allocator wrote. :func:`dirty_scope` says which
queued requests a committed batch may re-explain.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import msgspec

from events import decisions as ev
from events import intents
from events.values import AllocationSpec, FilterCount
from services.allocator import domain
from services.allocator.domain import fairshare
from services.allocator.domain.model import QUEUED, AllocationState
from services.allocator.domain.queue import grant_order
from services.allocator.domain.state import ClusterState

PROBE_ID = "~current-reason~"
"""Allocation id the spec is re-decided under (``~`` is in no Kubernetes name or UID)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Reason(msgspec.Struct, frozen=True, kw_only=True):
    """Why a request waits now. ``code``: ``capacity`` | ``quota`` | ``gang`` (still queued), ``fits`` (it
    would be granted now: the next queue drain takes it), ``unschedulable``/``invalid``/... (the
    domain would reject it now); ``reason`` the text; ``quota_dimension`` the quota check that
    blocks (``""`` otherwise); ``filters``: GPUs each filter removes in its pool now; ``node``/
    ``gpus``: where it would go when ``code`` is ``fits``."""

    code: str
    reason: str
    quota_dimension: str = ""
    filters: tuple[FilterCount, ...] = ()
    node: str = ""
    gpus: tuple[str, ...] = ()

    def row(self) -> tuple[str, str, str]:
        """The read-model columns ``(reason, code, quota_dimension)``."""
        return self.reason, self.code, self.quota_dimension


def explainer() -> domain.Scheduler:
    """A Scheduler for explanations: a queued request's reason carries the full per-filter counts
    (the writer's hot path leaves them out), cached per request shape and pool version. Keep one
    per projection (a reader's, the reason keeper's): it follows the projection's changes, so
    each explanation costs what changed since the last one."""
    return domain.Scheduler(explaining=True)


def current(state: ClusterState, spec: AllocationSpec, scheduler: domain.Scheduler | None = None) -> Reason:
    """The reason ``spec`` (a queued request) would get if it arrived now, with the per-filter
    counts. Pure; ``scheduler``: a long-lived :func:`explainer` for ``state`` (a fresh one when
    None: it indexes the whole state). Cost with a kept explainer: one ``decide`` (O(log nodes)
    when the pool's summaries or the known-unfit shapes answer) and, once per request shape and
    pool version, a filter pass over the spec's pool."""
    member = domain.gang_reason(state, spec)
    if member is not None:
        code, text, dimension = member
        return Reason(code=code, reason=text, quota_dimension=dimension)
    events = _probe(state, spec, _EPOCH, scheduler)
    for event in events:
        if isinstance(event, ev.AllocationQueued):
            return Reason(code=event.code, reason=event.reason, quota_dimension=event.quota_dimension,
                          filters=event.filters)
        if isinstance(event, ev.AllocationGranted):
            where = f"{event.node} ({', '.join(event.gpus)})"
            how = f" by preempting {', '.join(event.preempted)}" if event.preempted else ""
            return Reason(code="fits", reason=f"fits now on {where}{how}; granted at the next queue drain",
                          node=event.node, gpus=tuple(event.gpus))
        if isinstance(event, ev.AllocationRejected):
            return Reason(code=event.code, reason=event.reason, quota_dimension=event.quota_dimension,
                          filters=event.filters)
    text = next((e.reason for e in events if isinstance(e, ev.IntentRejected)), "not decidable")
    return Reason(code="invalid", reason=text)


def _probe(state: ClusterState, spec: AllocationSpec, now: datetime,
           scheduler: domain.Scheduler | None) -> list[ev.AnyEvent]:
    """The events ``decide`` gives ``spec`` arriving at ``now`` under the probe id (nothing written)."""
    probe = msgspec.structs.replace(spec, allocation_id=PROBE_ID)
    return domain.decide(state, intents.RequestAllocation(intent_id=PROBE_ID, spec=probe), now,
                         scheduler or explainer())


def taken_now(state: ClusterState, spec: AllocationSpec, now: datetime, scheduler: domain.Scheduler | None = None
              ) -> tuple[ev.AllocationGranted, list[ev.AllocationPreempted]] | None:
    """When ``spec`` arriving at ``now`` would be granted by taking allocations (a priority
    preemption or, in a pool with shares, a reclaim), its grant and the victims' AllocationPreempted
    events; None when it would not take any. Pure. Cost: one ``decide``."""
    events = _probe(state, spec, now, scheduler)
    granted = next((e for e in events if isinstance(e, ev.AllocationGranted) and e.spec.allocation_id == PROBE_ID),
                   None)
    if granted is None or not granted.preempted:
        return None
    return granted, [e for e in events if isinstance(e, ev.AllocationPreempted)]


def preemption_now(state: ClusterState, spec: AllocationSpec, now: datetime,
                   scheduler: domain.Scheduler | None = None) -> domain.Plan | domain.NoPlan:
    """The preemption plan ``spec`` would get at ``now`` if it fit nowhere (victims, node, GPUs), or
    why there is none (pool setting, priorities, protection, scope, capacity). Cost: one plan search."""
    probe = msgspec.structs.replace(spec, allocation_id=PROBE_ID)
    return domain.preemption_plan(state, probe, now, scheduler)


def filters_now(state: ClusterState, spec: AllocationSpec,
                scheduler: domain.Scheduler | None = None) -> tuple[FilterCount, ...]:
    """GPUs of ``spec``'s pool each filter removes for it now (TensorFusion FilterDetail); cached
    per request shape and pool version by a kept :func:`explainer`."""
    return tuple(domain.explain(state, spec, scheduler or explainer()))


def queued(state: ClusterState, scheduler: domain.Scheduler | None = None) -> list[AllocationState]:
    """The queued allocations in grant order (priority, QoS, in a pool with shares the share's
    weighted dominant share, then arrival: domain/fairshare.py ``waiting``); ``scheduler``: a kept
    explainer, whose pool capacities spare a walk over each pool's GPUs."""
    out = []
    rank_of = None if scheduler is None else (lambda pool, share: scheduler.rank(state, pool, share))
    for allocation_id in fairshare.waiting(state, rank_of):
        allocation = state.allocations.get(allocation_id)
        if allocation is not None and allocation.status == QUEUED:
            out.append(allocation)
    return out


def fair_standing(state: ClusterState, allocation: AllocationState,
                  scheduler: domain.Scheduler | None = None) -> fairshare.Standing | None:
    """Where a queued request's share stands in its pool's fair-share order: which share is ahead
    and by how much (None in a pool without shares). Cost: O(queue groups)."""
    spec = allocation.spec
    scheduler = scheduler or explainer()
    return fairshare.standing(state, spec.pool, spec.namespace, grant_order(allocation),
                              scheduler.capacity(state, spec.pool), state.share_index.usage_of)


def all_current(state: ClusterState) -> dict[str, Reason]:
    """Current reason of every queued allocation (cost: one ``decide`` per queued request, one
    filter pass per request shape)."""
    scheduler = explainer()
    return {a.spec.allocation_id: current(state, a.spec, scheduler) for a in queued(state)}


class Scope(msgspec.Struct, kw_only=True):
    """Which queued requests a batch may re-explain: those in ``pools`` or ``namespaces``, or all."""

    everything: bool = False
    pools: set[str] = set()
    namespaces: set[str] = set()

    def covers(self, spec: AllocationSpec) -> bool:
        """True when ``spec``'s reason may have changed."""
        return self.everything or spec.pool in self.pools or spec.namespace in self.namespaces

    def merge(self, other: Scope) -> None:
        """Add ``other`` to this scope."""
        self.everything = self.everything or other.everything
        self.pools |= other.pools
        self.namespaces |= other.namespaces


_NEUTRAL = (ev.NodeHeartbeat, ev.IntentRejected, ev.ResizeRejected,
            ev.GangPlaced, ev.GangTimedOut, ev.GangDegraded)  # gang facts: their grants/releases say where


def dirty_scope(events: Iterable[ev.AnyEvent]) -> Scope:
    """Where reasons may have changed after ``events``: an allocation event touches its pool's
    capacity and its namespace's quota usage (a preemption too); a quota event its namespace; a
    HeartbeatsChecked the pools whose time-based blocks ended (``pools``); node, GPU and pool events
    (rare) everything; heartbeats and refused intents nothing."""
    scope = Scope(pools=set(), namespaces=set())
    for event in events:
        if isinstance(event, ev.AllocationQueued) and event.spec.gang is not None:
            scope.namespaces.add(event.spec.namespace)  # its gang's other members' presence changed
            continue
        if isinstance(event, ev.AllocationQueued | ev.AllocationRejected):
            continue  # changes no capacity or usage; a new queued row is written with its fresh reason
        if isinstance(event, ev.AllocationGranted):
            scope.pools.add(event.spec.pool)
            scope.namespaces.add(event.spec.namespace)
        elif isinstance(event, ev.AllocationReleased | ev.AllocationResized | ev.AllocationPreempted):
            scope.pools.add(event.pool)
            scope.namespaces.add(event.namespace)
        elif isinstance(event, ev.QuotaSet | ev.QuotaRemoved):
            scope.namespaces.add(event.namespace)
        elif isinstance(event, ev.DefragStarted | ev.MoveReserved | ev.MoveCompleted | ev.MoveCancelled
                        | ev.DefragEnded):
            scope.pools.add(event.pool)  # a reservation's hold took or freed capacity in its pool
        elif isinstance(event, ev.HeartbeatsChecked):
            scope.pools.update(event.pools)  # a protection, reclaim runtime or rate window ended there
        elif not isinstance(event, _NEUTRAL):
            scope.everything = True
    return scope
