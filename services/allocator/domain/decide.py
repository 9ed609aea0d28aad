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
from services.allocator.domain.partition import OutOfContract
from services.allocator.domain.resize import decide_resize
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.validation import check_name, check_pool, check_quota, check_remove_share, check_share


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


def _set_share(state: ClusterState, intent: it.SetShare, now: datetime) -> list[ev.AnyEvent]:
    """ShareSet, or IntentRejected naming the field and value (validation.check_share)."""
    problem = check_share(state.shares, intent.name, intent.spec)
    if problem:
        return _rejected(intent, "set_share", problem, now)
    return [ev.ShareSet(at=now, name=intent.name, spec=intent.spec)]


def _remove_share(state: ClusterState, intent: it.RemoveShare, now: datetime) -> list[ev.AnyEvent]:
    """ShareRemoved, or IntentRejected (unknown share, or some share's parent)."""
    problem = check_remove_share(state.shares, intent.name)
    if problem:
        return _rejected(intent, "remove_share", problem, now)
    return [ev.ShareRemoved(at=now, name=intent.name)]


_NAMED = 5
"""How many nodes or allocations a refused pool removal names (then "and N more")."""


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def _remove_pool(state: ClusterState, intent: it.RemovePool, now: datetime) -> list[ev.AnyEvent]:
    """PoolRemoved, or IntentRejected (field ``pool``) naming what holds the pool: its nodes (remove
    them first), its live allocations (release them first), or that it has no configuration."""
    pool = intent.pool
    nodes = sorted(state.pool_nodes.get(pool, ()))
    if nodes:
        return _rejected(intent, "remove_pool", ("pool", pool, f"pool {pool} still has {len(nodes)} node(s): "
                                                 f"{_names(nodes)}; remove them first"), now)
    live = sorted(a.spec.allocation_id for a in state.allocations.values() if a.spec.pool == pool)
    if live:
        return _rejected(intent, "remove_pool", ("pool", pool, f"pool {pool} still has {len(live)} live "
                                                 f"allocation(s): {_names(live)}; release them first"), now)
    if pool not in state.pools:
        known = ", ".join(sorted(state.pools)) or "none"
        return _rejected(intent, "remove_pool", ("pool", pool, f"pool {pool} has no configuration to remove "
                                                 f"(configured pools: {known})"), now)
    return [ev.PoolRemoved(at=now, pool=pool)]


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
            try:
                return decide_request(state, intent, now, scheduler or Scheduler(), gang.decide_member)
            except OutOfContract as exc:  # never append an event the log could not replay
                return _rejected(intent, "request_allocation", (exc.field, exc.value, str(exc)), now)
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
        case it.RemovePool():
            return _remove_pool(state, intent, now)
        case it.SetShare():
            return _set_share(state, intent, now)
        case it.RemoveShare():
            return _remove_share(state, intent, now)
    raise TypeError(f"not an intent: {intent!r}")  # pragma: no cover - the union is exhaustive
