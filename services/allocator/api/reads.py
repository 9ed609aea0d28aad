"""Read handlers: pools, nodes, GPUs, allocations (with their live explanation), queue, quotas,
shares, status and simulate. Everything reads the reader's own projection (services.allocator.api.follower);
nothing is written.

Lists take their filters plus ``limit``/``continue`` (:mod:`services.allocator.api.paging`); a
single resource that does not exist is 404 ``{"error", "field"}``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from events.durations import go_duration_s
from events.values import NODE_PHASES, QOS_LEVELS
from services import podspec
from services.allocator.api import bounds, documents, ended, paging, reasons, share_status, simulation, views
from services.allocator.api.context import explainer_of, history_of, reason_of, state_of
from services.allocator.domain.model import AllocationState
from services.allocator.domain.queue import grant_order

_STATUSES = ("granted", "queued")


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


async def pools(request: web.Request) -> web.Response:
    """GET /api/v1/pools: every pool (documents.pool_doc), by name."""
    params = paging.query(request, allowed=())
    state = state_of(request)
    return _json(paging.page(documents.pool_names(state), key=lambda p: (p,), params=params,
                             render=lambda p: documents.pool_doc(state, p)))


async def pool(request: web.Request) -> web.Response:
    """GET /api/v1/pools/{pool}: one pool (documents.pool_doc), as ``PUT`` on the same path sets its
    configuration; 404 naming the known pools for one the reader does not know."""
    paging.query(request, allowed=())
    state = state_of(request)
    name = request.match_info["pool"]
    known = documents.pool_names(state)
    if name not in known:
        raise bounds.ApiError(404, f"pool {name!r} not found; known: {', '.join(known) or 'none'}", field="pool")
    return _json(documents.pool_doc(state, name))


async def nodes(request: web.Request) -> web.Response:
    """GET /api/v1/nodes?pool=&phase=&idle=&idle_for=: nodes (documents.node_doc), by name; ``phase``
    one of events.values.NODE_PHASES (400 naming them otherwise); ``idle=true`` only the nodes with no
    granted allocation (TensorFusion GpuAllocator.ListNonUsingNodes), ``false`` only the others;
    ``idle_for`` (a Go duration, ``30m``) only the nodes idle at least that long by the reader's clock
    (implies ``idle=true``; 400 with ``idle=false`` or a malformed duration)."""
    params = paging.query(request, allowed=("pool", "phase", "idle", "idle_for"),
                          choices={"phase": NODE_PHASES, "idle": ("true", "false")})
    idle = params.get("idle")
    cutoff = _idle_cutoff(params.get("idle_for"), idle)
    state = state_of(request)
    chosen = [n for n in state.nodes.values()
              if params.get("pool", n.pool) == n.pool and params.get("phase", n.phase) == n.phase
              and (idle is None or (n.idle_since is not None) == (idle == "true"))
              and (cutoff is None or (n.idle_since is not None and n.idle_since <= cutoff))]
    return _json(paging.page(chosen, key=lambda n: (n.name,), params=params,
                             render=lambda n: documents.node_doc(state, n)))


def _idle_cutoff(idle_for: str | None, idle: str | None) -> datetime | None:
    """The latest ``idle_since`` a node idle at least ``idle_for`` can have (now minus it), None
    without ``idle_for``; raises ApiError(400) naming ``idle_for``."""
    if idle_for is None:
        return None
    if idle == "false":
        raise bounds.ApiError(400, "idle_for selects idle nodes; it cannot be combined with idle=false",
                              field="idle_for")
    seconds = go_duration_s(idle_for)
    if seconds is None:
        raise bounds.ApiError(400, f'idle_for must be a duration such as "30m", "2h" or "1h30m", got {idle_for!r}',
                              field="idle_for")
    try:
        return datetime.now(UTC) - timedelta(seconds=float(seconds))
    except OverflowError:  # longer than any node can have been idle: none qualifies
        return datetime.min.replace(tzinfo=UTC)


async def node(request: web.Request) -> web.Response:
    """GET /api/v1/nodes/{name}: the node with its GPUs, allocations, phase and last heartbeat."""
    paging.query(request, allowed=())
    state = state_of(request)
    found = state.nodes.get(request.match_info["name"])
    if found is None:
        raise bounds.ApiError(404, f"node {request.match_info['name']!r} not found", field="name")
    return _json(documents.node_detail(state, found))


async def gpus(request: web.Request) -> web.Response:
    """GET /api/v1/gpus?pool=&node=&phase=: GPUs (views.gpu_view), by name."""
    params = paging.query(request, allowed=("pool", "node", "phase"))
    state = state_of(request)
    chosen = [g for g in state.gpus.values() if all(params.get(f, getattr(g, f)) == getattr(g, f)
                                                    for f in ("pool", "node", "phase"))]
    return _json(paging.page(chosen, key=lambda g: (g.name,), params=params,
                             render=lambda g: views.gpu_view(g, state.allocations)))


def _allocation_matches(allocation: AllocationState, params: dict[str, str]) -> bool:
    spec = allocation.spec
    fields = {"namespace": spec.namespace, "pod": spec.pod, "status": allocation.status,
              "node": allocation.node, "pool": spec.pool}
    return all(params.get(name, value) == value for name, value in fields.items())


async def allocations(request: web.Request) -> web.Response:
    """GET /api/v1/allocations?namespace=&pod=&status=&node=&pool=: live allocations by id; a
    queued one shows its current reason."""
    params = paging.query(request, allowed=("namespace", "pod", "status", "node", "pool"),
                          choices={"status": _STATUSES})
    state = state_of(request)
    chosen = [a for a in state.allocations.values() if _allocation_matches(a, params)]

    return _json(paging.page(chosen, key=lambda a: (a.spec.allocation_id,), params=params,
                             render=lambda a: _allocation_doc(request, a)[0]))


def _allocation_doc(request: web.Request, allocation: AllocationState) -> tuple[dict[str, Any], reasons.Reason | None]:
    """The allocation's document; a queued one shows its current reason (and keeps the reason it
    was queued with as ``queued_reason``). Returns the document and that current reason."""
    doc = documents.allocation_doc(allocation)
    doc["device"] = documents.device_doc(state_of(request), allocation)
    if allocation.status != "queued":
        return doc, None
    current = reason_of(request, allocation)
    doc.update(queued_reason=allocation.reason, reason=current.reason, code=current.code)
    return doc, current


async def allocation(request: web.Request) -> web.Response:
    """GET /api/v1/allocations/{id}: the allocation and its live explanation; 404 for one that is
    not live, with ``ended`` (:func:`services.allocator.api.ended.ended_life`, null when unknown)."""
    paging.query(request, allowed=())
    state = state_of(request)
    found = state.allocations.get(request.match_info["id"])
    if found is None:  # 404 saying how it ended (released, preempted, rejected), when and why
        life = await ended.ended_life(history_of(request), request.match_info["id"])
        return _json({"error": ended.sentence(request.match_info["id"], life), "field": "id", "ended": life}, 404)
    doc, current = _allocation_doc(request, found)
    return _json({**doc, "explanation": documents.explanation(state, found, current, datetime.now(UTC),
                                                                 explainer_of(request))})


async def node_allocations(request: web.Request) -> web.Response:
    """GET /api/v1/nodes/{name}/allocations: the allocations granted on the node, by id
    (TensorFusion GetAllocationReqByNodeName); 404 for an unknown node."""
    params = paging.query(request, allowed=())
    state = state_of(request)
    found = state.nodes.get(request.match_info["name"])
    if found is None:
        raise bounds.ApiError(404, f"node {request.match_info['name']!r} not found", field="name")
    chosen = [state.allocations[a] for a in found.workers if a in state.allocations]
    return _json(paging.page(chosen, key=lambda a: (a.spec.allocation_id,), params=params,
                             render=lambda a: _allocation_doc(request, a)[0]))


async def queue(request: web.Request) -> web.Response:
    """GET /api/v1/queue?pool=&namespace=&qos=: waiting requests in grant order with their current reason."""
    params = paging.query(request, allowed=("pool", "namespace", "qos"), choices={"qos": QOS_LEVELS})
    state = state_of(request)
    explaining = explainer_of(request)
    waiting = [(rank, a) for rank, a in enumerate(reasons.queued(state, explaining))
               if params.get("pool", a.spec.pool) == a.spec.pool
               and params.get("namespace", a.spec.namespace) == a.spec.namespace
               and params.get("qos", a.spec.qos) == a.spec.qos]
    # with shares the order moves with the shares' usage: pages follow the place in it
    key: Callable[[tuple[int, AllocationState]], tuple[int | str, ...]] = (
        (lambda item: (item[0],)) if state.share_index else (lambda item: grant_order(item[1])))
    return _json(paging.page(
        waiting, key=key, params=params,
        render=lambda item: documents.queue_entry(item[1], item[0], reason_of(request, item[1]),
                                                  reasons.fair_standing(state, item[1], explaining))))


async def quotas(request: web.Request) -> web.Response:
    """GET /api/v1/quotas?namespace=: namespaces with a quota or usage, by name."""
    params = paging.query(request, allowed=("namespace",))
    state = state_of(request)
    names = [n for n in set(state.quotas) | set(state.usage) if params.get("namespace", n) == n]
    return _json(paging.page(names, key=lambda n: (n,), params=params,
                             render=lambda n: documents.quota_doc(state, n)))


async def shares(request: web.Request) -> web.Response:
    """GET /api/v1/shares?pool=: every share (documents.share_doc), by name; ``pool`` keeps the
    shares taking part in that pool and only their figures there."""
    params = paging.query(request, allowed=("pool",))
    state = state_of(request)
    figures = share_status.all_figures(state)
    pool = params.get("pool")
    if pool is not None:
        figures = {n: [f for f in found if f.pool == pool] for n, found in figures.items()}
        figures = {n: found for n, found in figures.items() if found}
    return _json(paging.page(sorted(figures), key=lambda n: (n,), params=params,
                             render=lambda n: documents.share_doc(state, n, figures[n])))


async def share(request: web.Request) -> web.Response:
    """GET /api/v1/shares/{name}: one share with its figures per pool, parent and children; 404
    naming the known shares."""
    paging.query(request, allowed=())
    state = state_of(request)
    name = request.match_info["name"]
    if name not in state.shares:
        known = ", ".join(sorted(state.shares)[:20]) or "none"
        raise bounds.ApiError(404, f"no share {name[:80]!r} (shares: {known})", field="name")
    return _json(documents.share_doc(state, name, share_status.all_figures(state)[name]))


async def status(request: web.Request) -> web.Response:
    """GET /api/v1/status: the small summary (documents.summary)."""
    paging.query(request, allowed=())
    return _json(documents.summary(state_of(request)))


async def simulate(request: web.Request) -> web.Response:
    """POST /api/v1/simulate: what would be decided for the posted Pod now (nothing is written);
    400 ``{"error", "field"}`` for a body that is not a Pod or has invalid annotations (an unknown
    ``tensor-fusion.ai/*`` key among them); ``notes`` lists the TensorFusion annotations ignored."""
    paging.query(request, allowed=())
    pod = await bounds.read_object(request)
    state = state_of(request)
    spec = bounds.compose_pod(pod, state)
    result = simulation.simulate_spec(state, spec, scheduler=explainer_of(request))
    notes = podspec.annotation_notes(pod)
    return _json({**result, "notes": list(notes)} if notes else result)
