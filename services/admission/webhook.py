"""The HTTPS AdmissionReview endpoint (aiohttp): review, publish RequestAllocation, respond.

``POST /mutate-v1-pod`` (TensorFusion's path) answers every request with HTTP 200 and an
AdmissionReview (never 500: a body over :data:`MAX_BODY` is a 413, and an unexpected error while
reviewing is logged with its traceback and answered as a denial with code 400). The
RequestAllocation intent id is ``admit-<allocation id>`` (the pod UID, else the review UID), so
API-server retries publish a duplicate JetStream drops; it is checked against the contract's bounds
(:func:`events.guard.check_message`) before publishing. dryRun publishes nothing. When publishing
fails the failure policy decides: ``deny`` (code 503, message says why) or ``ignore`` (admit
unmutated, outside gpuledger). ``GET /healthz`` for probes.

With a ``token`` (``GPULEDGER_ADMISSION_WEBHOOK_TOKEN``; under ``gpuledger up`` the API token), a
review without ``Authorization: Bearer <token>`` is answered 401 before its body is read: the
Kubernetes API server sends the token from its AdmissionConfiguration kubeconfig
(docs/kubernetes.md), and counts the 401 as a failed call (``failurePolicy: Fail`` denies the pod).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from events import bounds, guard
from events.intents import RequestAllocation
from services.admission.review import Verdict, response_body, review
from services.admission.view import ClusterView

Publish = Callable[[RequestAllocation], Awaitable[object]]
"""Publishes one intent (services.shared.messaging.publish_intent bound to a JetStream context)."""

MAX_BODY = 7 * 2**20
"""Largest AdmissionReview accepted (controller-runtime's limit)."""

log = structlog.get_logger("gpuledger.admission.webhook")


def intent_id(allocation_id: str) -> str:
    """The deterministic RequestAllocation intent id of an allocation (idempotent retries)."""
    return f"admit-{allocation_id}"


async def _publish(verdict: Verdict, *, publish: Publish, timeout_s: float, failure_policy: str) -> Verdict:
    if verdict.spec is None:
        return verdict
    spec = verdict.spec
    intent = RequestAllocation(intent_id=intent_id(spec.allocation_id), spec=spec)
    try:
        guard.check_message(intent)
    except bounds.BoundsError as exc:
        return Verdict(uid=verdict.uid, api_version=verdict.api_version, allowed=False, code=400,
                       field=exc.field, message=f"gpuledger cannot request this allocation: {exc}")
    try:
        async with asyncio.timeout(timeout_s):  # no extra task per request, unlike wait_for
            await publish(intent)
    except Exception as exc:
        log.warning("publish_failed", allocation_id=spec.allocation_id, error=repr(exc), policy=failure_policy)
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if failure_policy == "ignore":
            return Verdict(
                uid=verdict.uid,
                api_version=verdict.api_version,
                allowed=True,
                message=f"gpuledger unavailable ({reason}); pod admitted unmanaged (failurePolicy=ignore)",
            )
        return Verdict(
            uid=verdict.uid,
            api_version=verdict.api_version,
            allowed=False,
            code=503,
            field="nats",
            message=f"gpuledger cannot record the allocation request for pod "
            f"{spec.namespace}/{spec.pod} ({reason}); the message bus is unavailable, retry later",
        )
    return verdict


def authorized(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` as ``Bearer <token>`` (compared
    in constant time); always True when ``token`` is "" (no authentication configured)."""
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(errors="replace"), token.encode())


def _unauthorized() -> web.Response:
    body = {"error": "the webhook requires Authorization: Bearer <token> (the API server's AdmissionConfiguration "
                     "kubeconfig; under gpuledger up: GPULEDGER_API_TOKEN)", "field": "Authorization"}
    return web.json_response(body, status=401, headers={"WWW-Authenticate": 'Bearer realm="gpuledger-webhook"'})


def build_app(
    *, view: ClusterView, publish: Publish, failure_policy: str = "deny", publish_timeout_s: float = 2.0,
    token: str = "",
) -> web.Application:
    """The aiohttp application serving ``/mutate-v1-pod`` and ``/healthz``; with ``token``, a review
    must carry ``Authorization: Bearer <token>`` (401 JSON ``{"error", "field"}`` otherwise)."""

    async def mutate(request: web.Request) -> web.Response:
        if not authorized(request.headers.get("Authorization"), token):
            log.info("review refused: no valid bearer token", peer=request.remote)
            return _unauthorized()
        body = await request.read()
        try:
            verdict = review(body, view=view)
        except Exception as exc:  # a bug must not become a 500 that fails every pod of the cluster
            log.exception("review_failed", error=repr(exc))
            verdict = Verdict(allowed=False, code=400, field="request",
                              message=f"gpuledger cannot review this pod: {type(exc).__name__}")
        verdict = await _publish(verdict, publish=publish, timeout_s=publish_timeout_s, failure_policy=failure_policy)
        if not verdict.allowed:
            log.info("denied", uid=verdict.uid, field=verdict.field, message=verdict.message)
        return web.Response(body=response_body(verdict), content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/mutate-v1-pod", mutate)
    app.router.add_get("/healthz", healthz)
    return app
