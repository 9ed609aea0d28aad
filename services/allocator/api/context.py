"""What the handlers share through the aiohttp application: the allocator, the reason keeper, the
token, and the writer's outcome waiter (``web.AppKey``s), with typed accessors."""

from __future__ import annotations

from aiohttp import web

from services.allocator.api import reasons
from services.allocator.api.bounds import ApiError
from services.allocator.api.keeper import ReasonKeeper
from services.allocator.api.outcomes import OutcomeWaiter
from services.allocator.domain.model import AllocationState
from services.allocator.loop.leader import Allocator

ALLOCATOR_KEY = web.AppKey("allocator", Allocator)
KEEPER_KEY = web.AppKey("reason_keeper", ReasonKeeper)
WAITER_KEY = web.AppKey("outcome_waiter", OutcomeWaiter)


def allocator_of(request: web.Request) -> Allocator:
    """The allocator this API serves."""
    return request.app[ALLOCATOR_KEY]


def reason_of(request: web.Request, allocation: AllocationState) -> reasons.Reason:
    """The current reason of a queued ``allocation``: the keeper's when it is up to date with the
    projection, else computed now (one ``decide``)."""
    cached = request.app[KEEPER_KEY].lookup(allocation.spec.allocation_id)
    return cached if cached is not None else reasons.current(allocator_of(request).state, allocation.spec)


def waiter_of(request: web.Request) -> OutcomeWaiter:
    """The outcome waiter of the write endpoints (raises ApiError 503 when the allocator has no NATS)."""
    waiter = request.app.get(WAITER_KEY)
    if waiter is None:
        raise ApiError(503, "this allocator has no NATS connection: writes are unavailable", field="")
    return waiter
