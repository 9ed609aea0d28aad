"""What the handlers share through the aiohttp application (``web.AppKey``s), with typed accessors.

The reader's app holds its projection (:class:`~services.allocator.api.follower.Follower`), the
log's History port, the reason keeper, the outcome waiter of the writes, and the body parser; the
writer's app holds only the allocator (its probes).
"""

from __future__ import annotations

from aiohttp import web

from services.allocator.api import reasons
from services.allocator.api.bounds import ApiError
from services.allocator.api.follower import Follower
from services.allocator.api.keeper import ReasonKeeper
from services.allocator.api.outcomes import OutcomeWaiter
from services.allocator.domain import Scheduler
from services.allocator.domain.model import AllocationState
from services.allocator.domain.state import ClusterState
from services.allocator.loop.leader import Allocator
from services.allocator.ports import History

ALLOCATOR_KEY = web.AppKey("allocator", Allocator)
FOLLOWER_KEY = web.AppKey("follower", Follower)
HISTORY_KEY = web.AppKey("history", History)
KEEPER_KEY = web.AppKey("reason_keeper", ReasonKeeper)
WAITER_KEY = web.AppKey("outcome_waiter", OutcomeWaiter)


def allocator_of(request: web.Request) -> Allocator:
    """The allocator (writer) whose probes this app serves."""
    return request.app[ALLOCATOR_KEY]


def follower_of(request: web.Request) -> Follower:
    """The reader's projection this API serves."""
    return request.app[FOLLOWER_KEY]


def state_of(request: web.Request) -> ClusterState:
    """The reader's projection now (``position`` = the last log position applied)."""
    return request.app[FOLLOWER_KEY].state


def history_of(request: web.Request) -> History:
    """The log's History port (events of an allocation, newest life of a pod)."""
    return request.app[HISTORY_KEY]


def reason_of(request: web.Request, allocation: AllocationState) -> reasons.Reason:
    """The current reason of a queued ``allocation``: the keeper's when it is up to date with the
    projection, else computed now (one ``decide``)."""
    cached = request.app[KEEPER_KEY].lookup(allocation.spec.allocation_id)
    return cached if cached is not None else reasons.current(state_of(request), allocation.spec, explainer_of(request))


def explainer_of(request: web.Request) -> Scheduler:
    """The reader's kept explaining Scheduler (the reason keeper's; ``reasons.explainer``)."""
    return request.app[KEEPER_KEY].explainer


def waiter_of(request: web.Request) -> OutcomeWaiter:
    """The outcome waiter of the write endpoints (raises ApiError 503 when the reader has no NATS)."""
    waiter = request.app.get(WAITER_KEY)
    if waiter is None:
        raise ApiError(503, "this reader has no NATS connection: writes are unavailable", field="")
    return waiter
