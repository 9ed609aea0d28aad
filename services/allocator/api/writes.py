"""Write handlers of the reader: each publishes ONE intent on NATS, as any producer does, and answers with
its decision (:mod:`services.allocator.api.outcomes`), or 202 ``{"intent_id", "status":
"pending"}`` when it is not decided within ``?wait=`` seconds (default 10, at most 60).

A decision is 200 with the ``submit --json`` shape (``type`` says granted, queued, rejected,
released, ...); a refused one (:func:`refusal`) adds ``error`` and ``field``: 404 for an allocation
that is not live (saying how it ended, :mod:`~services.allocator.api.ended`), 409 for a resize of a
queued one, 400 for bad input. NATS unreachable: 503.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from events import guard as events_guard
from events import intents
from events.bounds import MAX_LABEL_VALUE_LENGTH, MAX_NAME_LENGTH, BoundsError
from events.values import Resources
from services import podspec
from services.allocator.api import bodies, bounds, documents, ended, paging
from services.allocator.api.context import follower_of, history_of, state_of, waiter_of
from services.allocator.domain.model import AllocationState

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


async def _decide(request: web.Request, intent: intents.AnyIntent, wait_s: float) -> web.Response:
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
    if kind == "intent_rejected" or (kind == "resize_rejected" and code == "invalid"):
        return 400, view["reason"]
    return 200, ""


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
    spec = bounds.compose_pod(pod)
    state = state_of(request)
    live = _live_pod(state.allocations, spec.namespace, spec.pod)
    if live is not None:
        return web.json_response({**documents.allocation_doc(live), "type": "existing"})
    return await _decide(request, intents.RequestAllocation(intent_id=_intent_id("request"), spec=spec), wait)


async def release(request: web.Request) -> web.Response:
    """DELETE /api/v1/allocations/{id}?wait=: release a granted allocation or withdraw a queued one."""
    params = paging.query(request, allowed=("wait",))
    allocation_id = bodies.name(request.match_info["id"], field="id", limit=bodies.MAX_ID_CHARS)
    intent = intents.ReleaseAllocation(intent_id=_intent_id("release"), allocation_id=allocation_id,
                                       reason="released through the HTTP API")
    return await _decide(request, intent, _wait_of(params))


async def resize(request: web.Request) -> web.Response:
    """POST /api/v1/allocations/{id}/resize?wait=: body ``{"request": {"tflops", "vram"},
    "limit": {...}}`` (per GPU; ``limit`` defaults to ``request``; a dimension left out keeps the live
    allocation's value, as ``gpuledger resize`` does, instead of becoming 0)."""
    params = paging.query(request, allowed=("wait",))
    allocation_id = bodies.name(request.match_info["id"], field="id", limit=bodies.MAX_ID_CHARS)
    body = await bounds.read_object(request)
    bodies.only(body, ("request", "limit"), field="body")
    live = state_of(request).allocations.get(allocation_id)
    asked = _kept(body.get("request"), bodies.resources(body.get("request"), field="request"),
                  live.spec.request if live is not None else None)
    limit = asked if body.get("limit") is None else _kept(
        body["limit"], bodies.resources(body["limit"], field="limit"), live.spec.limit if live is not None else None)
    intent = intents.ResizeAllocation(intent_id=_intent_id("resize"), allocation_id=allocation_id,
                                      request=asked, limit=limit)
    return await _decide(request, intent, _wait_of(params))


def _kept(raw: Any, parsed: Resources, current: Resources | None) -> Resources:
    """``parsed`` (from the body object ``raw``) with the dimensions ``raw`` leaves out taken from
    ``current``, the live allocation's (a compute percent is kept only when ``tflops`` is left out)."""
    if current is None or not isinstance(raw, dict):
        return parsed
    tflops = "tflops" in raw
    return Resources(milli_tflops=parsed.milli_tflops if tflops else current.milli_tflops,
                     compute_milli_percent=0 if tflops else current.compute_milli_percent,
                     vram_bytes=parsed.vram_bytes if "vram" in raw else current.vram_bytes)


async def set_quota(request: web.Request) -> web.Response:
    """PUT /api/v1/quotas/{namespace}?wait=: body in the ``quota`` shape of GET /api/v1/quotas;
    ``namespace`` must be a Kubernetes namespace name (a quota on any other name could never apply)."""
    params = paging.query(request, allowed=("wait",))
    namespace = bodies.namespace(request.match_info["namespace"])
    spec = bodies.quota(await bounds.read_object(request))
    return await _decide(request, intents.SetQuota(intent_id=_intent_id("quota"), namespace=namespace, spec=spec),
                         _wait_of(params))


async def remove_quota(request: web.Request) -> web.Response:
    """DELETE /api/v1/quotas/{namespace}?wait=: remove the namespace's quota."""
    params = paging.query(request, allowed=("wait",))
    namespace = bodies.name(request.match_info["namespace"], field="namespace", limit=MAX_LABEL_VALUE_LENGTH)
    return await _decide(request, intents.RemoveQuota(intent_id=_intent_id("unquota"), namespace=namespace),
                         _wait_of(params))


async def configure_pool(request: web.Request) -> web.Response:
    """PUT /api/v1/pools/{pool}?wait=: body a PoolConfig (``placement``, ``vram_weight``,
    ``tflops_weight``, ``max_workers_per_node``)."""
    params = paging.query(request, allowed=("wait",))
    pool = bodies.name(request.match_info["pool"], field="pool", limit=MAX_NAME_LENGTH)
    config = bodies.pool_config(await bounds.read_object(request))
    return await _decide(request, intents.ConfigurePool(intent_id=_intent_id("pool"), pool=pool, config=config),
                         _wait_of(params))
