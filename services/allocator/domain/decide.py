"""decide(state, intent, now) -> events: the pure decision for one intent (no I/O, no clock).

Dispatches on the intent type; every intent yields at least one event, exactly one of which is
its outcome (consequences such as released allocations of a removed node come with it).
"""

from __future__ import annotations

from datetime import datetime

from events import decisions as ev
from events import intents as it
from events.base import Intent
from services.allocator.domain import gang, profile
from services.allocator.domain.allocate import decide_release, decide_request
from services.allocator.domain.inventory import decide_heartbeats, decide_register, decide_remove
from services.allocator.domain.resize import decide_resize
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.validation import check_name, check_pool, check_quota


def _rejected(intent: Intent, tag: str, problem: tuple[str, str, str], now: datetime) -> list[ev.AnyEvent]:
    field, value, reason = problem
    return [ev.IntentRejected(at=now, intent_id=intent.intent_id, intent_type=tag, field=field, value=value,
                              reason=reason)]


def _set_quota(state: ClusterState, intent: it.SetQuota, now: datetime) -> list[ev.AnyEvent]:
    if not intent.namespace:
        return _rejected(intent, "set_quota", ("namespace", "", "namespace must not be empty"), now)
    problem = check_name("namespace", intent.namespace, field="namespace") or check_quota(intent.spec)
    if problem:
        return _rejected(intent, "set_quota", problem, now)
    return [ev.QuotaSet(at=now, namespace=intent.namespace, spec=intent.spec)]


def _remove_quota(state: ClusterState, intent: it.RemoveQuota, now: datetime) -> list[ev.AnyEvent]:
    if intent.namespace not in state.quotas:
        problem = ("namespace", intent.namespace, f"namespace {intent.namespace} has no quota")
        return _rejected(intent, "remove_quota", problem, now)
    return [ev.QuotaRemoved(at=now, namespace=intent.namespace)]


def _configure_pool(state: ClusterState, intent: it.ConfigurePool, now: datetime) -> list[ev.AnyEvent]:
    if not intent.pool:
        return _rejected(intent, "configure_pool", ("pool", "", "pool must not be empty"), now)
    problem = (check_name("pool", intent.pool, field="pool")
               or check_pool(intent.config, frozenset(profile.STRATEGIES)))
    if problem:
        return _rejected(intent, "configure_pool", problem, now)
    return [ev.PoolConfigured(at=now, pool=intent.pool, config=intent.config)]


def decide(state: ClusterState, intent: it.AnyIntent, now: datetime, scheduler: Scheduler | None = None
           ) -> list[ev.AnyEvent]:
    """The events ``intent`` produces against ``state`` at ``now`` (UTC); never mutates ``state``.

    ``scheduler`` is the caller's long-lived Scheduler for this state (built in the composition
    root); without one a fresh Scheduler is built, which indexes the whole state (one-off use).
    A release of a placed gang member below its gang's quorum adds GangDegraded (gang.with_degraded).
    """
    return gang.with_degraded(state, _decide(state, intent, now, scheduler), now)


def _decide(state: ClusterState, intent: it.AnyIntent, now: datetime, scheduler: Scheduler | None
            ) -> list[ev.AnyEvent]:
    match intent:
        case it.RequestAllocation():
            return decide_request(state, intent, now, scheduler or Scheduler(), gang.decide_member)
        case it.ReleaseAllocation():
            return decide_release(state, intent, now)
        case it.ResizeAllocation():
            return decide_resize(state, intent, now)
        case it.RegisterNode():
            return decide_register(state, intent, now)
        case it.RemoveNode():
            return decide_remove(state, intent, now)
        case it.CheckHeartbeats():
            return decide_heartbeats(state, intent, now) + gang.time_out(state, now)
        case it.SetQuota():
            return _set_quota(state, intent, now)
        case it.RemoveQuota():
            return _remove_quota(state, intent, now)
        case it.ConfigurePool():
            return _configure_pool(state, intent, now)
    raise TypeError(f"not an intent: {intent!r}")  # pragma: no cover - the union is exhaustive
