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
from services.allocator.domain.allocate import attempt, granted, summarize
from services.allocator.domain.evolve import evolve
from services.allocator.domain.model import QuotaUsage
from services.allocator.domain.placement import Blocked, Grant, lower_bound_usage
from services.allocator.domain.quota import check_totals
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
        s.changes.seq, s.changes.inventory = state.changes.seq, state.changes.inventory
        self.state = s
        self.scheduler = scheduler.fork(state, s)
        self._copied: set[str] = set()

    def _own(self, kind: str, name: str) -> bool:
        mark = f"{kind}\0{name}"
        if mark in self._copied:
            return False
        self._copied.add(mark)
        return True

    def apply(self, event: ev.AllocationGranted) -> None:
        """Fold ``event`` into the scratch state only (as a grant from the queue: the pool's recent
        requests, which arrivals feed, stay the real state's)."""
        s = self.state
        for name in event.gpus:
            if self._own("gpu", name):
                gpu = s.gpus[name]
                s.gpus[name] = msgspec.structs.replace(gpu, charges=dict(gpu.charges))
        if self._own("node", event.node):
            node = s.nodes[event.node]
            s.nodes[event.node] = msgspec.structs.replace(node, workers=list(node.workers))
        namespace = event.spec.namespace
        if namespace in s.usage and self._own("usage", namespace):
            s.usage[namespace] = msgspec.structs.replace(s.usage[namespace])
        evolve(s, msgspec.structs.replace(event, from_queue=True))


class Placed(NamedTuple):
    """Every member of the quorum fits: ``grants`` in placement order (quorum first, then the
    members beyond it that fit); ``left`` the members beyond the quorum that did not fit."""

    grants: list[ev.AllocationGranted]
    left: list[tuple[AllocationSpec, Blocked]]


class Failed(NamedTuple):
    """The quorum does not fit: ``member`` (None: the whole quorum's quota) is blocked by
    ``blocked`` after ``placed`` members before it found a place, in ``view`` (the state it was
    tried on and its scheduler; None for the quota of the whole quorum)."""

    member: AllocationSpec | None
    blocked: Blocked
    placed: int
    view: tuple[ClusterState, Scheduler] | None

    def describe(self) -> str:
        """Which member cannot fit where: ``member w-3 (uid-3) cannot fit with 2 placed before it:
        0/16 GPUs fit in pool p: ...`` or the quota reason of the whole quorum."""
        if self.member is None:
            return self.blocked.reason
        who = f"member {self.member.pod or self.member.allocation_id} ({self.member.allocation_id})"
        text = self.blocked.reason
        if self.blocked.code == "capacity" and self.view is not None:
            state, scheduler = self.view
            filters, _ = scheduler.filter_pass(state, self.member)
            text = summarize(filters, sum(f.removed for f in filters), self.member.pool)
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


def place(state: ClusterState, members: list[AllocationSpec], quorum: int, scheduler: Scheduler, now: datetime,
          *, arriving: str = "") -> Placed | Failed:
    """Place ``members[:quorum]`` all together or none of them, then as many of the rest as fit.

    ``members``: the gang's waiting members in arrival order (``arriving``: the id of the one
    whose request is being decided now, granted with ``from_queue`` False). Never mutates
    ``state``; ``scheduler`` keeps its caches for ``state``. Cost: one ``attempt`` on ``state``
    when the first member finds no room, else the scratch copy plus one ``attempt`` per member."""
    head = members[:quorum]
    block = quorum_quota(state, head)
    if block is not None:
        return Failed(None, block, 0, None)
    first = attempt(state, head[0], scheduler)  # the common "no room" answer without a scratch copy
    if not isinstance(first, Grant):
        return Failed(head[0], first, 0, (state, scheduler))
    scratch = Scratch(state, scheduler)
    grants: list[ev.AllocationGranted] = []
    left: list[tuple[AllocationSpec, Blocked]] = []
    for i, spec in enumerate(members):
        outcome = first if i == 0 else attempt(scratch.state, spec, scratch.scheduler)
        if isinstance(outcome, Grant):
            event = granted(spec, outcome, now=now, from_queue=spec.allocation_id != arriving)
            scratch.apply(event)
            grants.append(event)
        elif i < quorum:
            return Failed(spec, outcome, i, (scratch.state, scratch.scheduler))
        else:
            left.append((spec, outcome))
    return Placed(grants, left)
