"""Time-based blocks that ended: the pools whose queue a CheckHeartbeats retries.

A queued request may be waiting only for time to pass, with no event in its pool to come:

* **eviction protection**: a lower-priority allocation (or, in a pool with shares, a borrowed one)
  it could preempt or reclaim is under ``tensor-fusion.ai/eviction-protection`` until its request
  time + duration (domain/deadlines.py ``protected_until``; protected while ``now < until``);
* **reclaim minimum runtime**: a borrowed allocation of a pool with shares is spared until it has
  run the pool's ``reclaim_min_runtime_s`` (domain/reclaim.py; eligible once
  ``now - granted_at >= reclaim_min_runtime_s``);
* **reclaim rate**: the pool reclaimed ``reclaim_max_per_minute`` allocations in the last minute
  (domain/reclaim.py; a reclaim at ``t`` counts while ``now < t + 1 min``).

kube-scheduler moves unschedulable pods back to its active queue on events and at least every
``podMaxInUnschedulablePodsDuration`` (5 minutes); gpuledger retries a pool once such a block in
it has ended, at the leader's next liveness tick (every ``heartbeat_check_s``), and not otherwise.
The tick publishes CheckHeartbeats when :func:`pools` is not empty, and deciding it names those
pools in ``HeartbeatsChecked.pools``; the queue drain then retries every request there, as a
release would (domain/process.py ``hints_of``). "Ended" means at or before ``now`` and after the
previous HeartbeatsChecked (``ClusterState.checked_at``, folded from the log, so a replay decides
the same pools). A pool without queued requests, or with preemption ``off`` (no preemption, no
reclaim), is never named. Pure.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from events.values import priority_of
from services.allocator.domain.evolve import RECLAIM_WINDOW
from services.allocator.domain.state import ClusterState


def pools(state: ClusterState, now: datetime) -> tuple[str, ...]:
    """The pools (sorted names) with queued requests where a time-based block (module docstring)
    ended after ``state.checked_at`` (None: ever) and at or before ``now``. Cost: O(queue groups),
    then per such pool O(log n + blocks ended) on ``state.deadlines`` and its recent reclaims."""
    top: dict[str, int] = {}
    for group in state.queue.groups:
        pool, priority = cast(str, group[0]), cast(int, group[2])
        if priority > top.get(pool, priority - 1):
            top[pool] = priority
    since = state.checked_at
    return tuple(pool for pool in sorted(top)
                 if state.pool_config(pool).preemption != "off"
                 and (_protection_ended(state, pool, top[pool], since, now)
                      or _runtime_reached(state, pool, since, now) or _rate_passed(state, pool, since, now)))


def _protection_ended(state: ClusterState, pool: str, top: int, since: datetime | None, now: datetime) -> bool:
    """Whether the eviction protection of a granted allocation of ``pool`` that a queued request
    could take ended in (since, now]: priority below ``top`` (the highest queued there), or borrowed
    in a pool with shares (reclaim ignores priority)."""
    shared = pool in state.share_index.terms
    allocations = state.allocations
    for aid in state.deadlines.protection_ended(pool, since, now):
        allocation = allocations[aid]
        if priority_of(allocation.spec) < top or (shared and allocation.borrowed):
            return True
    return False


def _runtime_reached(state: ClusterState, pool: str, since: datetime | None, now: datetime) -> bool:
    """Whether a borrowed allocation of a pool with shares reached the pool's ``reclaim_min_runtime_s``
    in (since, now] (it was granted in (since - runtime, now - runtime])."""
    runtime_s = state.pool_config(pool).reclaim_min_runtime_s
    if not runtime_s or pool not in state.share_index.terms:
        return False
    runtime = timedelta(seconds=runtime_s)
    return state.deadlines.borrowed_between(pool, None if since is None else since - runtime, now - runtime)


def _rate_passed(state: ClusterState, pool: str, since: datetime | None, now: datetime) -> bool:
    """Whether the minute of one of the pool's remembered reclaims ended in (since, now], lowering
    the count its ``reclaim_max_per_minute`` bounds. The times a reclaim dropped (evolve
    ``_preempted``: their minute had ended by then) need no check: a reclaim is a release on a node
    of the pool, so the drain after it retried the pool's waiting requests under the count it left."""
    times = state.reclaims.get(pool)
    if not times or not state.pool_config(pool).reclaim_max_per_minute or pool not in state.share_index.terms:
        return False
    return any(_between(t + RECLAIM_WINDOW, since, now) for t in times)


def _between(at: datetime, since: datetime | None, now: datetime) -> bool:
    return (since is None or since < at) and at <= now
