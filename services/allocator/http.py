"""The HTTP shells (aiohttp): routes, authentication, error handling, start-up.

Two applications share one middleware list (:func:`middlewares`):

- the writer's (:func:`build_writer_app`, ``gpuledger allocator``): only ``/healthz``, ``/readyz``
  and ``/metrics``; nothing a client can ask costs the decision loop more than a probe;
- a reader's (:func:`build_app`, ``gpuledger api``), the HTTP API (docs/operations.md, and the
  OpenAPI document served at ``/openapi.json``): open ``GET /healthz``, ``/readyz``, ``/metrics``,
  ``/openapi.json``; under ``/api/v1`` the reads (pools, nodes, GPUs, allocations with their live
  explanation, queue, quotas, shares, status, simulate) from the reader's own projection, and the writes
  (submit, release, resize, quota and share set/remove, pool configure) that publish one intent each on
  NATS; the dashboard under ``/ui/``.

When ``GPULEDGER_API_TOKEN`` (or ``GPULEDGER_API_TOKEN_FILE``) is set, every route but the four
open ones (:data:`OPEN_PATHS`) needs ``Authorization: Bearer <token>`` (401 otherwise; compared
in constant time). Every refusal is ``{"error", "field"}`` with a 4xx status; bodies are bounded
(services.allocator.api.bounds).

Before any of that, the HTTP edge (services.shared.http_edge) refuses a foreign Host (421), a
cross-site write (403) and a non-JSON body (415; YAML on :data:`YAML_ROUTES`), and its connection
guard bounds stalled connections.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from services.allocator import dashboard
from services.allocator.api import bounds, context, defrag, openapi, probes, reads, writes
from services.allocator.api.follower import Follower
from services.allocator.api.keeper import ReasonKeeper
from services.allocator.api.outcomes import OutcomeWaiter
from services.allocator.api.whatif.route import WhatIfRoute
from services.allocator.loop.leader import Allocator
from services.allocator.ports import History
from services.shared import http_edge

log = structlog.get_logger(__name__)

TOKEN_ENV = "GPULEDGER_API_TOKEN"
TOKEN_FILE_ENV = "GPULEDGER_API_TOKEN_FILE"
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WRITER_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/healthz", probes.healthz), ("GET", "/readyz", probes.readyz), ("GET", "/metrics", probes.metrics),
)
"""The writer's only routes: its probes and its metrics."""

ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/healthz", probes.healthz), ("GET", "/readyz", probes.reader_readyz),
    ("GET", "/metrics", probes.reader_metrics), ("GET", "/openapi.json", openapi.serve),
    ("GET", "/api/v1/pools", reads.pools), ("GET", "/api/v1/pools/{pool}", reads.pool),
    ("PUT", "/api/v1/pools/{pool}", writes.configure_pool),
    ("DELETE", "/api/v1/pools/{pool}", writes.remove_pool),
    ("GET", "/api/v1/pools/{pool}/defrag-plan", defrag.defrag_plan),
    ("GET", "/api/v1/pools/{pool}/defrag", defrag.defrag_status),
    ("POST", "/api/v1/pools/{pool}/defrag", defrag.defrag_run),
    ("DELETE", "/api/v1/pools/{pool}/defrag", defrag.defrag_cancel),
    ("GET", "/api/v1/nodes", reads.nodes), ("GET", "/api/v1/nodes/{name}", reads.node),
    ("GET", "/api/v1/nodes/{name}/allocations", reads.node_allocations),
    ("GET", "/api/v1/gpus", reads.gpus),
    ("GET", "/api/v1/allocations", reads.allocations), ("POST", "/api/v1/allocations", writes.submit),
    ("GET", "/api/v1/allocations/{id}", reads.allocation), ("DELETE", "/api/v1/allocations/{id}", writes.release),
    ("POST", "/api/v1/allocations/{id}/resize", writes.resize),
    ("GET", "/api/v1/queue", reads.queue), ("GET", "/api/v1/quotas", reads.quotas),
    ("PUT", "/api/v1/quotas/{namespace}", writes.set_quota),
    ("DELETE", "/api/v1/quotas/{namespace}", writes.remove_quota),
    ("GET", "/api/v1/shares", reads.shares), ("GET", "/api/v1/shares/{name}", reads.share),
    ("PUT", "/api/v1/shares/{name}", writes.set_share), ("DELETE", "/api/v1/shares/{name}", writes.remove_share),
    ("GET", "/api/v1/status", reads.status), ("POST", "/api/v1/simulate", reads.simulate),
    ("POST", "/api/v1/whatif", WhatIfRoute().handle),
)
"""Every route of a reader: (method, path, handler). The OpenAPI document lists exactly these."""

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


def middlewares(token: str, *, bind_host: str = "127.0.0.1",
                edge: http_edge.EdgeSettings | None = None) -> list[Middleware]:
    """The middleware list of both applications: errors, the HTTP edge's request policy (Host,
    cross-site writes, content types: services.shared.http_edge.request_policy, from ``edge`` or
    the environment, for a server bound to ``bind_host``), the ``/ui`` slash, authentication."""
    # normalize_path: `/ui` (no slash, as people type it) -> 308 to `/ui/`, before authentication
    slash = web.normalize_path_middleware(append_slash=True, merge_slashes=False)
    policy = http_edge.request_policy(edge or http_edge.load(), bind_host=bind_host, yaml_routes=YAML_ROUTES)
    return [_errors, policy, slash, _auth_middleware(token)]


def build_writer_app(allocator: Allocator, *, token: str = "", bind_host: str = "127.0.0.1",
                     edge: http_edge.EdgeSettings | None = None) -> web.Application:
    """The writer's application: ``/healthz``, ``/readyz``, ``/metrics`` of ``allocator`` and nothing
    else (no body is ever read: the client size bound is 1 KiB); ``bind_host``/``edge`` as in
    :func:`middlewares`."""
    app = web.Application(client_max_size=1024, middlewares=middlewares(token, bind_host=bind_host, edge=edge))
    app[context.ALLOCATOR_KEY] = allocator
    for method, path, handler in WRITER_ROUTES:
        app.router.add_route(method, path, handler)
    return app


def build_app(follower: Follower, history: History, *, waiter: OutcomeWaiter | None = None,
              token: str = "", parser: bounds.BodyParser | None = None, bind_host: str = "127.0.0.1",
              edge: http_edge.EdgeSettings | None = None) -> web.Application:
    """A reader's application over its projection ``follower`` and the log's ``history``;
    ``waiter`` publishes the writes (None: writes answer 503); ``token`` non-empty requires it on
    /api/; ``parser`` parses large bodies off the event loop (default: a new worker process,
    ended with the app); ``bind_host``/``edge`` as in :func:`middlewares`."""
    app = web.Application(client_max_size=bounds.MAX_BODY_BYTES,
                          middlewares=middlewares(token, bind_host=bind_host, edge=edge))
    app[context.FOLLOWER_KEY] = follower
    app[context.HISTORY_KEY] = history
    keeper = ReasonKeeper(follower, history)
    app[context.KEEPER_KEY] = keeper
    follower.listeners.append(keeper.note)
    if waiter is not None:
        app[context.WAITER_KEY] = waiter
    app[bounds.PARSER_KEY] = parser or bounds.BodyParser()
    app[probes.READER_METRICS_KEY] = probes.ReaderMetrics(follower)
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    for method, path, handler in SLASHED_ID_ROUTES:
        app.router.add_route(method, path, _joined_id(handler))
    app.cleanup_ctx.append(_background)
    dashboard.mount(app, follower, history, token=token)  # the web dashboard under /ui/ (services/allocator/dashboard)
    return app


async def _background(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(app[context.KEEPER_KEY].run(stop))
    yield
    stop.set()
    task.cancel()
    await asyncio.wait([task], timeout=5)
    await app[bounds.PARSER_KEY].aclose()
    waiter = app.get(context.WAITER_KEY)
    if waiter is not None:
        await waiter.close()


async def start(app: web.Application, *, host: str, port: int, server: str = "allocator API",
                edge: http_edge.EdgeSettings | None = None) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0 = any free port) behind the connection guard of
    services.shared.http_edge (settings ``edge``, default from ``GPULEDGER_HTTP_*``); returns the
    runner (``await runner.cleanup()``) and the bound port. ``server`` names it in the log."""
    runner, bound, _ = await http_edge.serve(app, host=host, port=port, server=server,
                                             settings=edge or http_edge.load())
    return runner, bound
