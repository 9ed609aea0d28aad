"""The allocator's HTTP API (aiohttp): routes, authentication, error handling, start-up.

Routes (docs/operations.md, and the OpenAPI document served at ``/openapi.json``):
open ``GET /healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``; under ``/api/v1`` the reads
(pools, nodes, GPUs, allocations with their live explanation, queue, quotas, status, simulate) and
the writes (submit, release, resize, quota set/remove, pool configure) that publish one intent
each. When ``GPULEDGER_API_TOKEN`` (or ``GPULEDGER_API_TOKEN_FILE``) is set, every route but the
four open ones (:data:`OPEN_PATHS`) needs ``Authorization: Bearer <token>`` (401 otherwise; compared
in constant time). Every refusal
is ``{"error", "field"}`` with a 4xx status; bodies are bounded (services.allocator.api.bounds).
Before any of that, the HTTP edge (services.shared.http_edge) refuses a foreign Host (421), a
cross-site write (403) and a non-JSON body (415; YAML on :data:`YAML_ROUTES`), and its connection
guard bounds stalled connections.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from nats.aio.client import Client as NATS

from services.allocator import dashboard
from services.allocator.api import bounds, context, gauges, openapi, probes, quota_gauges, reads, writes
from services.allocator.api.keeper import ReasonKeeper
from services.allocator.api.outcomes import OutcomeWaiter
from services.allocator.loop.leader import Allocator
from services.allocator.ports import StoredEvent
from services.shared import http_edge

log = structlog.get_logger(__name__)

TOKEN_ENV = "GPULEDGER_API_TOKEN"
TOKEN_FILE_ENV = "GPULEDGER_API_TOKEN_FILE"
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Listener = Callable[[Sequence[StoredEvent]], None]

ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/healthz", probes.healthz), ("GET", "/readyz", probes.readyz), ("GET", "/metrics", probes.metrics),
    ("GET", "/openapi.json", openapi.serve),
    ("GET", "/api/v1/pools", reads.pools), ("PUT", "/api/v1/pools/{pool}", writes.configure_pool),
    ("DELETE", "/api/v1/pools/{pool}", writes.remove_pool),
    ("GET", "/api/v1/nodes", reads.nodes), ("GET", "/api/v1/nodes/{name}", reads.node),
    ("GET", "/api/v1/nodes/{name}/allocations", reads.node_allocations),
    ("GET", "/api/v1/gpus", reads.gpus),
    ("GET", "/api/v1/allocations", reads.allocations), ("POST", "/api/v1/allocations", writes.submit),
    ("GET", "/api/v1/allocations/{id}", reads.allocation), ("DELETE", "/api/v1/allocations/{id}", writes.release),
    ("POST", "/api/v1/allocations/{id}/resize", writes.resize),
    ("GET", "/api/v1/queue", reads.queue), ("GET", "/api/v1/quotas", reads.quotas),
    ("PUT", "/api/v1/quotas/{namespace}", writes.set_quota),
    ("DELETE", "/api/v1/quotas/{namespace}", writes.remove_quota),
    ("GET", "/api/v1/status", reads.status), ("POST", "/api/v1/simulate", reads.simulate),
)
"""Every route: (method, path, handler). The OpenAPI document lists exactly these."""

SLASHED_ID_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/api/v1/allocations/{namespace}/{pod}", reads.allocation),
    ("DELETE", "/api/v1/allocations/{namespace}/{pod}", writes.release),
    ("POST", "/api/v1/allocations/{namespace}/{pod}/resize", writes.resize),
)
"""Aliases of the ``{id}`` routes for an id ``NAMESPACE/POD`` written with its slash unencoded
(``/api/v1/allocations/team-a/demo``, as people type it; ``team-a%2Fdemo`` is the canonical form)."""


YAML_ROUTES = (("POST", "/api/v1/allocations"), ("POST", "/api/v1/simulate"))
"""Routes whose body is a Pod manifest, which may be sent as YAML (``application/yaml``); every other
body must be ``application/json`` (services.shared.http_edge.request_policy)."""


def _joined_id(handler: Handler) -> Handler:
    """``handler`` of an ``{id}`` route, serving a ``{namespace}/{pod}`` alias (the id is the two joined)."""
    async def serve(request: web.Request) -> web.StreamResponse:
        found = request.match_info
        found["id"] = f"{found['namespace']}/{found['pod']}"  # match_info is the request's own dict
        return await handler(request)
    return serve


def token_from_env(environ: Mapping[str, str] | None = None) -> str:
    """The API token from GPULEDGER_API_TOKEN or the file GPULEDGER_API_TOKEN_FILE names ("" = no
    authentication); raises ValueError when both are set, the file is unreadable or empty."""
    env = os.environ if environ is None else environ
    value, path = env.get(TOKEN_ENV, ""), env.get(TOKEN_FILE_ENV, "")
    if value and path:
        raise ValueError(f"{TOKEN_ENV} and {TOKEN_FILE_ENV} are both set; set one")
    if not path:
        return value.strip()
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{TOKEN_FILE_ENV}: cannot read {path}: {exc}") from exc
    if not value:
        raise ValueError(f"{TOKEN_FILE_ENV}: {path} is empty")
    return value


def _auth_middleware(token: str) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        # A route of a sub-application (the dashboard under /ui) is checked by that application's own
        # middleware, which also takes the token from its login cookie; routing decides, not the path text.
        if token and request.path not in OPEN_PATHS and len(request.match_info.apps) <= 1:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                return web.json_response({"error": "a bearer token is required (Authorization: Bearer <token>)",
                                          "field": "Authorization"}, status=401,
                                         headers={"WWW-Authenticate": 'Bearer realm="gpuledger"'})
        return await handler(request)
    return authenticate


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """ApiError -> its 4xx JSON; aiohttp's own 4xx as JSON; anything else is logged (a bug) -> 500."""
    try:
        return await handler(request)
    except bounds.ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response({"error": exc.reason, "field": ""}, status=exc.status, headers=allow)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error in the HTTP API", path=request.path, method=request.method)
        return web.json_response({"error": "internal error (logged)", "field": ""}, status=500)


def _never_raising(listener: Listener) -> Listener:
    """A commit listener that logs instead of raising (it runs inside the allocator's commit path)."""
    def guarded(stored: Sequence[StoredEvent]) -> None:
        try:
            listener(stored)
        except Exception:
            log.exception("a commit listener of the HTTP API failed")
    return guarded


def build_app(allocator: Allocator, *, token: str = "", nc: NATS | None = None, bind_host: str = "127.0.0.1",
              edge: http_edge.EdgeSettings | None = None) -> web.Application:
    """The aiohttp application serving ``allocator``; ``token`` non-empty requires it on /api/;
    ``nc`` (the NATS connection writes wait on for their outcome; None: writes do not wait).
    ``bind_host`` and ``edge`` (default: from the environment) set the Host / cross-site /
    content-type policy (services.shared.http_edge.request_policy)."""
    # normalize_path: `/ui` (no slash, as people type it) -> 308 to `/ui/`, before authentication
    slash = web.normalize_path_middleware(append_slash=True, merge_slashes=False)
    policy = http_edge.request_policy(edge or http_edge.load(), bind_host=bind_host, yaml_routes=YAML_ROUTES)
    app = web.Application(client_max_size=bounds.MAX_BODY_BYTES,
                          middlewares=[_errors, policy, slash, _auth_middleware(token)])
    app[context.ALLOCATOR_KEY] = allocator
    keeper = ReasonKeeper(allocator)
    app[context.KEEPER_KEY] = keeper
    if nc is not None:
        app[context.WAITER_KEY] = OutcomeWaiter(nc)
    allocator.listeners.append(_never_raising(keeper.note))
    allocator.listeners.append(_never_raising(
        lambda stored: allocator.metrics.record_outcomes(stored, allocator.state)))
    allocator.metrics.watch("pools", lambda: gauges.PoolCollector(lambda: allocator.state))
    allocator.metrics.watch("quotas", lambda: quota_gauges.QuotaCollector(lambda: allocator.state))
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    for method, path, handler in SLASHED_ID_ROUTES:
        app.router.add_route(method, path, _joined_id(handler))
    app.cleanup_ctx.append(_background)
    dashboard.mount(app, allocator, token=token)  # the web dashboard under /ui/ (services/allocator/dashboard)
    return app


async def _background(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(app[context.KEEPER_KEY].run(stop))
    yield
    stop.set()
    task.cancel()
    await asyncio.wait([task], timeout=5)
    waiter = app.get(context.WAITER_KEY)
    if waiter is not None:
        await waiter.close()


async def start(allocator: Allocator, *, host: str, port: int,
                nc: NATS | None = None) -> tuple[web.AppRunner, int]:
    """Serve on ``host:port`` (0 = any free port) behind the connection guard of
    services.shared.http_edge; returns the runner (``await runner.cleanup()``) and the bound port.
    The token and the edge settings come from the environment (:func:`token_from_env`,
    ``GPULEDGER_HTTP_*``); ``nc`` as in :func:`build_app`."""
    edge = http_edge.load()
    app = build_app(allocator, token=token_from_env(), nc=nc, bind_host=host, edge=edge)
    runner, bound, _ = await http_edge.serve(app, host=host, port=port, server="allocator API", settings=edge)
    return runner, bound
