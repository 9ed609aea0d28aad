"""Simulate: what the allocator would decide for a Pod now, and why, without writing anything.

Composes the Pod's request with ``services.podspec.compose`` (raises PodSpecError naming the
field), runs the pure ``decide`` on the projection (decide never mutates it) and ``explain`` for
the per-filter counts. Output: the ``simulate --json`` shape (``{"allocation_request", "outcome",
"filters", "preemption", "device"}``; ``preemption`` is what the decision takes (a priority plan
or, in a pool with shares, a reclaim: ``views.taken_view``), or why no priority preemption would
help, and null for a plain grant; ``device`` what a grant becomes on the pod,
services.podspec.device_plan, null unless granted).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from events import decisions, intents
from events.values import AllocationSpec
from services import podspec
from services.allocator import domain
from services.allocator.api import views
from services.allocator.domain.state import ClusterState
from services.podspec.device_plan import device_plan, enforcement_of, plan_view


def simulate(state: ClusterState, pod: dict[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """``{"allocation_request", "outcome", "filters": [{"name", "removed"}], "preemption"}`` for ``pod``.

    ``outcome`` is the first outcome event of the request (granted, queued or rejected) with
    ``position`` null. Raises podspec.PodSpecError for a bad Pod.
    """
    return simulate_spec(state, podspec.compose(pod), now=now)


def simulate_spec(state: ClusterState, spec: AllocationSpec, *, now: datetime | None = None,
                  scheduler: domain.Scheduler | None = None) -> dict[str, Any]:
    """:func:`simulate` for an already composed request; ``scheduler``: a kept explaining Scheduler
    for ``state`` (a reader's, ``reasons.explainer``; None: a fresh one for this answer)."""
    now = now or datetime.now(UTC)
    intent = intents.RequestAllocation(intent_id=f"simulate-{spec.allocation_id}", spec=spec)
    scheduler = scheduler or domain.Scheduler(explaining=True)  # the full per-filter reason, one index for all three
    events = domain.decide(state, intent, now, scheduler)
    outcome = next((e for e in events if views.is_outcome_of(e, spec.allocation_id)), None)
    if outcome is None or (isinstance(outcome, decisions.AllocationGranted) and not outcome.preempted):
        preemption = None
    elif isinstance(outcome, decisions.AllocationGranted):  # what decide took: a priority plan or a reclaim
        preemption = views.taken_view(outcome, [e for e in events if isinstance(e, decisions.AllocationPreempted)])
    else:
        preemption = views.preemption_view(domain.preemption_plan(state, spec, now, scheduler))
    return {
        "allocation_request": views.spec_view(spec),
        "outcome": None if outcome is None else views.outcome_view(outcome, position=None),
        "filters": [{"name": f.name, "removed": f.removed} for f in domain.explain(state, spec, scheduler)],
        "preemption": preemption,
        "device": _device(state, spec, outcome),
    }


def _device(state: ClusterState, spec: AllocationSpec, outcome: object) -> dict[str, Any] | None:
    if not isinstance(outcome, decisions.AllocationGranted):
        return None
    records = {g: state.gpus[g].spec for g in outcome.gpus if g in state.gpus}
    mode = enforcement_of(spec, state.pool_config(spec.pool).enforcement)
    return plan_view(device_plan(spec, enforcement=mode, gpus=outcome.gpus, partitions=outcome.partitions,
                                 records=records))
