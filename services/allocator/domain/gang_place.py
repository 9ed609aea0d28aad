"""All-or-none placement of a gang's quorum on a hypothetical state; the real state is never touched.

The members are admitted one after another by ``attempt`` (every filter, the pool's strategy,
quota) on a :class:`Scratch`: a copy-on-write variant of the state in which each member's grant
is folded by ``evolve`` before the next one is tried, so the next member sees the GPUs, node
resources and quota usage the earlier ones took (quota is counted for the whole gang). Either
every member of the quorum finds a place, and the grants are the decision's events, or the
first member that does not fit is reported and nothing is emitted. TensorFusion reaches the same
all-or-none outcome with reservations held at Permit (internal/gang/manager.go); gpuledger holds
nothing while a gang waits (docs/compatibility.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import msgspec

from events import decisions as ev
from events.values import AllocationSpec
from services.allocator.domain.allocate import attempt, granted, no_room
from services.allocator.domain.evolve import evolve
from services.allocator.domain.model import QuotaUsage
from services.allocator.domain.placement import Blocked, Grant, lower_bound_usage
from services.allocator.domain.preempting import explained, plan_events
from services.allocator.domain.preemption import NoPlan, find
from services.allocator.domain.quota import check_totals
from services.allocator.domain.reclaim import ReclaimPlan, marked, may_reclaim, may_take, neither, reclaim_events
from services.allocator.domain.reclaim import find as reclaim_plan
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState


class Scratch:
    """A hypothetical copy of ``state``: its dicts are shallow copies and a record is copied the
    first time a grant changes it (GPUs, nodes, quota usage); ``scheduler`` is forked for it.
    Cost: O(GPUs + nodes + allocations) dict copies and the node index copy, then O(touched)."""

    __slots__ = ("_copied", "scheduler", "state")

    def __init__(self, state: ClusterState, scheduler: Scheduler) -> None:
        s = ClusterState()
        s.position = state.position
        s.gpus, s.nodes, s.allocations = dict(state.gpus), dict(state.nodes), dict(state.allocations)
        s.usage = dict(state.usage)
        s.quotas, s.pools, s.recent, s.pool_nodes = state.quotas, state.pools, state.recent, state.pool_nodes
        s.shares, s.share_index = state.shares, state.share_index.copy()
        s.reclaims = {pool: list(times) for pool, times in state.reclaims.items()}  # the rate bound sees the quorum's
        s.changes.continuing(state.changes)
        self.state = s
        self.scheduler = scheduler.fork(state, s)
        self._copied: set[str] = set()

    def _own(self, kind: str, name: str) -> bool:
        mark = f"{kind}\0{name}"
        if mark in self._copied:
            return False
        self._copied.add(mark)
        return True

    def apply(self, event: ev.AllocationGranted | ev.AllocationPreempted) -> None:
        """Fold ``event`` into the scratch state only (a grant as one from the queue: the pool's
        recent requests, which arrivals feed, stay the real state's; a preemption as a release)."""
        s = self.state
        if isinstance(event, ev.AllocationPreempted):
            victim = s.allocations[event.allocation_id]
            self._own_records(event.gpus, event.node, victim.spec.namespace)
            evolve(s, event)
            return
        self._own_records(event.gpus, event.node, event.spec.namespace)
        evolve(s, msgspec.structs.replace(event, from_queue=True))

    def _own_records(self, gpus: tuple[str, ...], node_name: str, namespace: str) -> None:
        s = self.state
        for name in gpus:
            if self._own("gpu", name):
                gpu = s.gpus[name]
                s.gpus[name] = msgspec.structs.replace(gpu, charges=dict(gpu.charges))
        if self._own("node", node_name):
            node = s.nodes[node_name]
            s.nodes[node_name] = msgspec.structs.replace(node, workers=list(node.workers))
        if namespace in s.usage and self._own("usage", namespace):
            s.usage[namespace] = msgspec.structs.replace(s.usage[namespace])


class Placed(NamedTuple):
    """Every member of the quorum fits: ``events`` in placement order (quorum first, then the
    members beyond it that fit; a member that preempts has its AllocationPreempted events just
    before its grant); ``left`` the members beyond the quorum that did not fit."""

    events: list[ev.AnyEvent]
    left: list[tuple[AllocationSpec, Blocked]]

    @property
    def grants(self) -> list[ev.AllocationGranted]:
        """The members' grants, in placement order."""
        return [e for e in self.events if isinstance(e, ev.AllocationGranted)]


class Failed(NamedTuple):
    """The quorum does not fit: ``member`` (None: the whole quorum's quota) is blocked by
    ``blocked`` after ``placed`` members before it found a place, in ``view`` (the state it was
    tried on and its scheduler; None for the quota of the whole quorum)."""

    member: AllocationSpec | None
    blocked: Blocked
    placed: int
    view: tuple[ClusterState, Scheduler] | None
    no_plan: NoPlan | None = None

    def describe(self) -> str:
        """Which member cannot fit where: ``member w-3 (uid-3) cannot fit with 2 placed before it:
        0/16 GPUs fit in pool p: ...`` or the quota reason of the whole quorum."""
        if self.member is None:
            return self.blocked.reason
        who = f"member {self.member.pod or self.member.allocation_id} ({self.member.allocation_id})"
        text = self.blocked.reason
        if self.blocked.code == "capacity" and self.view is not None:
            state, scheduler = self.view
            text = no_room(state, self.member, scheduler)[0]
        if self.no_plan is not None:
            text = explained(text, self.no_plan, blocked_by=self.blocked.code)
        return f"{who} cannot fit with {self.placed} placed before it: {text}"


def quorum_quota(state: ClusterState, quorum: list[AllocationSpec]) -> Blocked | None:
    """The quota totals of each namespace against the whole quorum's known usage (a lower bound:
    compute percents count once GPUs are chosen), before any member is placed."""
    adds: dict[str, list[QuotaUsage]] = {}
    for spec in quorum:
        adds.setdefault(spec.namespace, []).append(lower_bound_usage(spec))
    for namespace, parts in sorted(adds.items()):
        quota = state.quotas.get(namespace)
        if quota is None:
            continue
        add = QuotaUsage(
            requests_milli_tflops=sum(p.requests_milli_tflops for p in parts),
            requests_vram_bytes=sum(p.requests_vram_bytes for p in parts),
            limits_milli_tflops=sum(p.limits_milli_tflops for p in parts),
            limits_vram_bytes=sum(p.limits_vram_bytes for p in parts), workers=len(parts),
        )
        block = check_totals(quota, namespace, usage=state.usage.get(namespace) or QuotaUsage(), add=add)
        if block is not None:
            reason = f"the quorum of {len(quorum)} in namespace {namespace} exceeds its quota: {block.reason}"
            return Blocked("quota", reason, block)
    return None


def _preempt(scratch: Scratch, spec: AllocationSpec, now: datetime, *, from_queue: bool
             ) -> list[ev.AnyEvent] | NoPlan:
    """The events of a preemption that makes ``spec`` fit on ``scratch`` (victims never of its own
    gang), or why there is none (domain/preemption.py, the rules of a single request)."""
    found = find(scratch.state, spec, now, scratch.scheduler)
    if isinstance(found, NoPlan):
        return found
    key = spec.gang.key if spec.gang else ""
    if any(v.spec.gang is not None and v.spec.gang.key == key for v in found.victims):
        return NoPlan("gang", f"the only plan preempts members of gang {key} itself")
    return marked(scratch.state, spec, plan_events(spec, found, now, from_queue=from_queue))


def _take(scratch: Scratch, spec: AllocationSpec, now: datetime, *, from_queue: bool) -> list[ev.AnyEvent] | NoPlan:
    """What a member of the quorum that fits nowhere takes, as a single request would
    (``reclaim.try_take``): in a pool with shares, a reclaim of other shares' borrowed work when its
    share, the members before it counted, stays within its guarantee (KAI reclaims for a whole
    podgroup, NVIDIA/KAI-Scheduler ``pkg/scheduler/actions/reclaim``); else a priority preemption
    (``_preempt``), its grant marked with the share. Never of the gang's own members: a reclaim
    takes nothing of the reclaimer's own share, a preemption refuses a plan that takes them."""
    state = scratch.state
    if spec.pool not in state.share_index.terms or may_reclaim(state, spec) is not None:
        return _preempt(scratch, spec, now, from_queue=from_queue)
    plan = reclaim_plan(state, spec, now, scratch.scheduler)
    if isinstance(plan, ReclaimPlan):
        return reclaim_events(state, spec, plan, now, from_queue=from_queue)
    found = _preempt(scratch, spec, now, from_queue=from_queue)
    return neither(found, plan) if isinstance(found, NoPlan) else found


def place(state: ClusterState, members: list[AllocationSpec], quorum: int, scheduler: Scheduler, now: datetime,
          *, arriving: str = "") -> Placed | Failed:
    """Place ``members[:quorum]`` all together or none of them, then as many of the rest as fit.

    ``members``: the gang's waiting members in arrival order (``arriving``: the id of the one
    whose request is being decided now, granted with ``from_queue`` False). A member of the quorum
    that fits nowhere may preempt lower-priority work, or in a pool with shares reclaim borrowed
    work, as a single request would (:func:`_take`), on the scratch state where the members before
    it are placed (so the victims are chosen for the whole quorum, member by member); nothing is
    preempted or reclaimed unless the whole quorum is placed. Never mutates
    ``state``; ``scheduler`` keeps its caches for ``state``. Cost: one ``attempt`` on ``state``
    when the first member finds no room and may not preempt, else the scratch copy plus one
    ``attempt`` (and, where it fails, one preemption search) per member."""
    head = members[:quorum]
    block = quorum_quota(state, head)
    if block is not None:
        return Failed(None, block, 0, None)
    first = attempt(state, head[0], scheduler)  # the common "no room" answer without a scratch copy
    if not isinstance(first, Grant) and not may_take(state, head[0], scheduler):
        return Failed(head[0], first, 0, (state, scheduler))
    scratch = Scratch(state, scheduler)
    events: list[ev.AnyEvent] = []
    left: list[tuple[AllocationSpec, Blocked]] = []
    for i, spec in enumerate(members):
        from_queue = spec.allocation_id != arriving
        outcome = first if i == 0 else attempt(scratch.state, spec, scratch.scheduler)
        if isinstance(outcome, Grant):
            made: list[ev.AnyEvent] = [granted(spec, outcome, now=now, from_queue=from_queue)]
        elif i >= quorum:
            left.append((spec, outcome))
            continue
        else:
            plan = _take(scratch, spec, now, from_queue=from_queue)
            if isinstance(plan, NoPlan):
                return Failed(spec, outcome, i, (scratch.state, scratch.scheduler), plan)
            made = plan
        for event in made:
            scratch.apply(event)  # type: ignore[arg-type]
        events.extend(made)
    return Placed(events, left)
