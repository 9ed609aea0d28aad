"""Write handlers of the reader: each publishes ONE intent on NATS, as any producer does, and answers with
its decision (:mod:`services.allocator.api.outcomes`), or 202 ``{"intent_id", "status":
"pending"}`` when it is not decided within ``?wait=`` seconds (default 10, at most 60).

A decision is 200 with the ``submit --json`` shape (``type`` says granted, queued, rejected,
released, ...); a refused one (:func:`refusal`) adds ``error`` and ``field``: 404 for an allocation
that is not live (saying how it ended, :mod:`~services.allocator.api.ended`), 409 for one in the
wrong state (a resize of a queued one, a pool that still has nodes or allocations), 400 for bad
input. NATS unreachable: 503.

What the projection already shows to be refused (an unknown or ended allocation, a resize of a
queued one or with request above limit, an unknown strategy, an unknown pool) is answered before
anything is published, so no ``intent_rejected`` enters the permanent log for it; the same checks
in ``decide`` still refuse such an intent from any other producer. Submits of one pod are
serialised (:class:`_PodTurns`): racing duplicates get the ``existing`` answer a sequential
duplicate gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from events import bounds as bounds_names
from events import guard as events_guard
from events import intents
from events.bounds import MAX_LABEL_VALUE_LENGTH, BoundsError
from events.values import Resources
from services import podspec
from services.allocator.api import bodies, bounds, documents, ended, paging, views
from services.allocator.api.context import follower_of, history_of, waiter_of
from services.allocator.api.follower import Follower
from services.allocator.domain import profile
from services.allocator.domain.model import GRANTED, AllocationState
from services.allocator.domain.state import ClusterState
from services.allocator.domain.validation import check_request_limit

DEFAULT_WAIT_S = 10.0
MAX_WAIT_S = 60.0
READ_YOUR_WRITE_S = 2.0
"""Longest a write waits, after its decision, for this reader's projection to apply it (a read
that follows the write on the same reader then sees it; the answer is sent either way)."""


def _wait_of(params: dict[str, str]) -> float:
    text = params.get("wait", str(DEFAULT_WAIT_S))
    try:
        wait = float(text)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT_S:
        raise bounds.ApiError(400, f"wait must be seconds from 0 to {MAX_WAIT_S:g}, got {text!r}", field="wait")
    return wait


async def _decide(request: web.Request, intent: intents.AnyIntent, wait_s: float,
                  adorn: Callable[[dict[str, Any]], None] | None = None) -> web.Response:
    try:
        events_guard.check_message(intent)
    except BoundsError as exc:
        raise bounds.ApiError(400, str(exc), field=exc.field) from exc
    try:
        view = await waiter_of(request).submit(intent, timeout_s=wait_s)
    except Exception as exc:  # NATS down or refusing: not the client's fault, and nothing was published
        raise bounds.ApiError(503, f"could not publish the intent: {exc!r}", field="") from exc
    if view is None:
        return web.json_response({"intent_id": intent.intent_id, "status": "pending"}, status=202)
    if isinstance(view.get("position"), int):  # read-your-writes: this reader shows the decision from now on
        await follower_of(request).wait_for(view["position"], timeout_s=READ_YOUR_WRITE_S)
    status, error = refusal(view)
    if status == 404:  # the decision is recorded; the answer says how the allocation ended, if it did
        allocation_id = getattr(intent, "allocation_id", "")
        error = ended.sentence(allocation_id, await ended.ended_life(history_of(request), allocation_id))
    extra = {"error": error, "field": "id" if status in (404, 409) else view.get("field") or "request"} if error else {}
    if adorn is not None:
        adorn(view)
    return web.json_response({**view, "intent_id": intent.intent_id, **extra}, status=status)


def refusal(view: dict[str, Any]) -> tuple[int, str]:
    """HTTP status of a decision and its error text ("" for 200): a release or resize of an
    allocation that is not live 404, a resize of a queued one 409 (not granted yet), bad input
    (``intent_rejected``, a resize with request > limit) 400; every other decision, also a resize
    that does not fit (``resize_rejected`` capacity/quota, like a ``rejected`` request), 200."""
    kind, code = view["type"], view.get("event", {}).get("code", "")
    if kind == "intent_rejected" and view.get("event", {}).get("intent_type") == "release_allocation" \
            and view.get("field") == "allocation_id":
        return 404, view["reason"]
    if kind == "resize_rejected" and code == "not_granted":
        return (409, view["reason"]) if view.get("namespace") else (404, view["reason"])
    if kind == "intent_rejected" and view.get("event", {}).get("intent_type") == "remove_pool":
        return 409, view["reason"]  # the pool gained a node or an allocation since the API looked
    if kind == "intent_rejected" and view.get("event", {}).get("intent_type") == "remove_share":
        return 409, view["reason"]  # the share is some share's parent: remove or re-parent the children
    if kind == "intent_rejected" or (kind == "resize_rejected" and code == "invalid"):
        return 400, view["reason"]
    return 200, ""


async def _not_live(request: web.Request, allocation_id: str) -> web.Response:
    """404 ``{"error", "field": "id", "ended"}`` saying how ``allocation_id`` ended (``ended`` null
    when it never existed), as GET /api/v1/allocations/{id} answers; nothing is published."""
    life = await ended.ended_life(history_of(request), allocation_id)
    return web.json_response({"error": ended.sentence(allocation_id, life), "field": "id", "ended": life},
                             status=404)


class _PodTurns:
    """One submit at a time per (namespace, pod) in this process: a duplicate that races the first
    waits for its decision and then finds the live allocation (``existing``), as a sequential
    duplicate does, instead of publishing a second RequestAllocation that ``decide`` refuses."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}  # (lock, holders and waiters)

    @contextlib.asynccontextmanager
    async def turn(self, namespace: str, pod: str) -> AsyncIterator[None]:
        """``async with turns.turn(namespace, pod):`` holds the pod's turn."""
        key = (namespace, pod)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


_TURNS: weakref.WeakKeyDictionary[Follower, _PodTurns] = weakref.WeakKeyDictionary()
"""The submit turns of each projection (reader) this process serves."""


def _intent_id(kind: str) -> str:
    return f"api-{kind}-{uuid.uuid4()}"


def _live_pod(allocations: dict[str, AllocationState], namespace: str, pod: str) -> AllocationState | None:
    return next((a for a in allocations.values() if a.spec.namespace == namespace and a.spec.pod == pod), None)


def _pod_of(document: dict[str, Any], *, force: bool) -> dict[str, Any]:
    """The Pod of a manifest, refused as the webhook would: only kind Pod, labelled
    ``tensor-fusion.ai/enabled: "true"`` (unless ``force``); namespace defaults to ``default``."""
    kind = document.get("kind", "Pod")
    if kind != "Pod":
        raise bounds.ApiError(400, f"kind={str(kind)[:64]!r}: only a Pod can be submitted", field="kind")
    meta = document.get("metadata")
    if not isinstance(meta, dict):
        raise bounds.ApiError(400, "metadata: a Pod object needs metadata", field="metadata")
    labels = meta.get("labels")
    if not force and not (isinstance(labels, dict) and labels.get(podspec.keys.ENABLED) == "true"):
        raise bounds.ApiError(400, f"the pod is not labelled {podspec.keys.ENABLED}: \"true\"; the webhook would "
                             "not allocate for it (add ?force=true to submit anyway)", field="metadata.labels")
    return {**document, "metadata": {**meta, "namespace": meta.get("namespace") or "default"}}


async def submit(request: web.Request) -> web.Response:
    """POST /api/v1/allocations?force=&wait=: request an allocation for a Pod manifest (JSON or
    YAML). Idempotent per namespace/pod: a live allocation of that pod is answered with 200."""
    params = paging.query(request, allowed=("force", "wait"), choices={"force": ("true", "false")})
    wait = _wait_of(params)
    pod = _pod_of(await bounds.read_object(request), force=params.get("force") == "true")
    follower = follower_of(request)
    spec = bounds.compose_pod(pod, follower.state)
    async with _TURNS.setdefault(follower, _PodTurns()).turn(spec.namespace, spec.pod):
        live = _live_pod(follower.state.allocations, spec.namespace, spec.pod)
        if live is not None:
            return web.json_response({**documents.allocation_doc(live), "type": "existing"})
        answer = await _decide(request, intents.RequestAllocation(intent_id=_intent_id("request"), spec=spec), wait)
        live = _live_pod(follower.state.allocations, spec.namespace, spec.pod)
        if answer.status == 400 and live is not None:  # raced a submit of another API process: same answer
            return web.json_response({**documents.allocation_doc(live), "type": "existing"})
        return answer


FRESH_WAIT_S = 2.0
"""How long a write waits for this reader to apply the log's head before it refuses from the projection."""


async def _fresh_state(request: web.Request) -> ClusterState:
    """The reader's projection once it has applied the log's newest position as of now (waiting at
    most :data:`FRESH_WAIT_S` seconds): what a write refuses from the projection (404 unknown, 409
    wrong state) must not come from a reader that is merely behind the writer."""
    follower = follower_of(request)
    await follower.wait_for(await follower.store.last_position(), timeout_s=FRESH_WAIT_S)
    return follower.state


async def release(request: web.Request) -> web.Response:
    """DELETE /api/v1/allocations/{id}?wait=: release a granted allocation or withdraw a queued one."""
    params = paging.query(request, allowed=("wait",))
    allocation_id = bodies.name(request.match_info["id"], field="id", limit=bodies.MAX_ID_CHARS)
    wait = _wait_of(params)
    if allocation_id not in (await _fresh_state(request)).allocations:
        return await _not_live(request, allocation_id)
    intent = intents.ReleaseAllocation(intent_id=_intent_id("release"), allocation_id=allocation_id,
                                       reason="released through the HTTP API")
    return await _decide(request, intent, wait)


async def resize(request: web.Request) -> web.Response:
    """POST /api/v1/allocations/{id}/resize?wait=: body ``{"request": {"tflops", "vram"},
    "limit": {...}}`` (per GPU); what the body leaves out, a side or a dimension, keeps the live
    allocation's value, as ``gpuledger resize`` does (:func:`bodies.resize_sides`)."""
    params = paging.query(request, allowed=("wait",))
    wait = _wait_of(params)
    allocation_id = bodies.name(request.match_info["id"], field="id", limit=bodies.MAX_ID_CHARS)
    body = await bounds.read_object(request)
    state = await _fresh_state(request)
    live = state.allocations.get(allocation_id)
    asked, limit = bodies.resize_sides(body, request=live.spec.request if live is not None else None,
                                       limit=live.spec.limit if live is not None else None)
    if live is None:
        return await _not_live(request, allocation_id)
    if live.status != GRANTED:
        raise bounds.ApiError(409, f"allocation {allocation_id!r} is {live.status}, not granted: only a granted "
                              "allocation can be resized", field="id")
    problem = check_request_limit(asked, limit)
    if problem:
        raise bounds.ApiError(400, problem[2], field="request")
    intent = intents.ResizeAllocation(intent_id=_intent_id("resize"), allocation_id=allocation_id,
                                      request=asked, limit=limit)
    return await _decide(request, intent, wait, adorn=lambda view: _add_remain(view, state, allocation_id))


def _add_remain(view: dict[str, Any], state: ClusterState, allocation_id: str) -> None:
    """Add ``remain`` to a refused resize (capacity or quota): the smallest available TFLOPS and
    VRAM of the allocation's GPUs now, what TensorFusion's AdjustAllocation returns as ``remaining``
    with ScalingQuotaExceededError, beside ``max_request`` (the largest request that would fit,
    its own charge counted as free)."""
    if view.get("type") != "resize_rejected" or "max_request" not in view:
        return
    allocation = state.allocations.get(allocation_id)
    gpus = [state.gpus[name] for name in (allocation.gpus if allocation is not None else []) if name in state.gpus]
    if gpus:
        view["remain"] = views.resources_view(Resources(
            milli_tflops=max(0, min(g.available_milli_tflops for g in gpus)),
            vram_bytes=max(0, min(g.available_vram_bytes for g in gpus))))


async def set_quota(request: web.Request) -> web.Response:
    """PUT /api/v1/quotas/{namespace}?wait=: body in the ``quota`` shape of GET /api/v1/quotas;
    ``namespace`` must be a Kubernetes namespace name (a quota on any other name could never apply)."""
    params = paging.query(request, allowed=("wait",))
    namespace = bodies.namespace(request.match_info["namespace"])
    spec = bodies.quota(await bounds.read_object(request))
    return await _decide(request, intents.SetQuota(intent_id=_intent_id("quota"), namespace=namespace, spec=spec),
                         _wait_of(params))


async def remove_quota(request: web.Request) -> web.Response:
    """DELETE /api/v1/quotas/{namespace}?wait=: remove the namespace's quota (404 when it has none)."""
    params = paging.query(request, allowed=("wait",))
    wait = _wait_of(params)
    namespace = bodies.name(request.match_info["namespace"], field="namespace", limit=MAX_LABEL_VALUE_LENGTH)
    if namespace not in (await _fresh_state(request)).quotas:
        raise bounds.ApiError(404, f"namespace {namespace[:80]!r} has no quota", field="namespace")
    return await _decide(request, intents.RemoveQuota(intent_id=_intent_id("unquota"), namespace=namespace),
                         wait)


async def set_share(request: web.Request) -> web.Response:
    """PUT /api/v1/shares/{name}?wait=: create or replace a share; body in the ``spec`` shape of GET
    /api/v1/shares/{name} (bodies.share). The allocator refuses (400, naming the field) a namespace
    already in another share, an unknown parent, a parent with namespaces or a parent of its own, a
    child guaranteed more than its parent."""
    params = paging.query(request, allowed=("wait",))
    name = bodies.share_name(request.match_info["name"])
    spec = bodies.share(await bounds.read_object(request))
    return await _decide(request, intents.SetShare(intent_id=_intent_id("share"), name=name, spec=spec),
                         _wait_of(params))


async def remove_share(request: web.Request) -> web.Response:
    """DELETE /api/v1/shares/{name}?wait=: remove a share (404 when there is none; 409, the
    allocator's refusal, while it is some share's parent). Its namespaces are in no share afterwards."""
    params = paging.query(request, allowed=("wait",))
    wait = _wait_of(params)
    name = bodies.name(request.match_info["name"], field="name", limit=bounds_names.MAX_NAME_LENGTH)
    state = await _fresh_state(request)
    if name not in state.shares:
        raise bounds.ApiError(404, f"no share {name[:80]!r} (shares: {', '.join(sorted(state.shares)[:20]) or 'none'})",
                              field="name")
    return await _decide(request, intents.RemoveShare(intent_id=_intent_id("unshare"), name=name), wait)


async def configure_pool(request: web.Request) -> web.Response:
    """PUT /api/v1/pools/{pool}?wait=: body some PoolConfig fields (``placement``, ``vram_weight``,
    ``defrag``, …); the fields left out keep the pool's current value (:func:`bodies.pool_config`)."""
    params = paging.query(request, allowed=("wait",))
    wait = _wait_of(params)
    pool = bodies.pool_name(request.match_info["pool"])
    body = await bounds.read_object(request)
    config = bodies.pool_config(body, (await _fresh_state(request)).pool_config(pool))
    if config.placement not in profile.STRATEGIES:
        raise bounds.ApiError(400, f"unknown placement strategy {config.placement[:64]!r}; known: "
                              f"{', '.join(sorted(profile.STRATEGIES))}", field="placement")
    return await _decide(request, intents.ConfigurePool(intent_id=_intent_id("pool"), pool=pool, config=config),
                         wait)


async def remove_pool(request: web.Request) -> web.Response:
    """DELETE /api/v1/pools/{pool}?wait=: remove a pool's configuration. 404 for a pool that is not
    configured (naming the configured ones), 409 while it has nodes or live allocations (naming
    them: remove the nodes, release the allocations first); then the PoolRemoved decision."""
    params = paging.query(request, allowed=("wait",))
    wait = _wait_of(params)
    pool = bodies.pool_name(request.match_info["pool"])
    state = await _fresh_state(request)
    nodes = sorted(state.pool_nodes.get(pool, ()))
    live = sorted(a.spec.allocation_id for a in state.allocations.values() if a.spec.pool == pool)
    if nodes or live:
        held = (f"{len(nodes)} node(s): {', '.join(nodes[:5])}" if nodes
                else f"{len(live)} live allocation(s): {', '.join(live[:5])}")
        raise bounds.ApiError(409, f"pool {pool!r} still has {held}{' ...' if len(nodes or live) > 5 else ''}; "
                              f"{'remove the nodes' if nodes else 'release the allocations'} first", field="pool")
    if pool not in state.pools:
        raise bounds.ApiError(404, f"pool {pool!r} is not configured (configured pools: "
                              f"{', '.join(sorted(state.pools)) or 'none'})", field="pool")
    return await _decide(request, intents.RemovePool(intent_id=_intent_id("unpool"), pool=pool), wait)


wait_of, fresh_state, intent_id, decide = _wait_of, _fresh_state, _intent_id, _decide
"""The write path's steps, for the write routes kept in their own modules (api/defrag.py)."""
