"""The allocator's HTTP API (aiohttp): health, readiness, Prometheus metrics, state, simulate.

Routes: ``GET /healthz`` (process alive), ``GET /readyz`` (200 ``{"role", "epoch", "position"}``
once the projection is loaded, leader or standby; 503 before), ``GET /metrics``,
``GET /api/v1/gpus``, ``GET /api/v1/allocations[?status=granted|queued]``, ``GET /api/v1/status``
(the ``status --json`` shape) and ``POST /api/v1/simulate`` (a Pod manifest, JSON or YAML ->
what would be chosen and why; nothing is written). Everything reads the in-memory projection.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import yaml
from aiohttp import web

from services.allocator import simulation, views
from services.allocator.service import Allocator
from services.podspec import PodSpecError

ALLOCATOR_KEY = web.AppKey("allocator", Allocator)


def _allocator(request: web.Request) -> Allocator:
    return request.app[ALLOCATOR_KEY]


async def healthz(request: web.Request) -> web.Response:
    """Liveness: always ``{"status": "ok"}`` while the event loop answers."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 with the role once the projection is loaded (leader or standby), else 503."""
    allocator = _allocator(request)
    body = {"role": allocator.keeper.role, "epoch": allocator.keeper.epoch,
            "position": allocator.state.position, "holder": allocator.keeper.holder}
    return web.json_response(body, status=200 if allocator.loaded.is_set() and not allocator.stuck else 503)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format; the queue depth is read from JetStream at scrape time."""
    allocator = _allocator(request)
    with contextlib.suppress(Exception):  # NATS unreachable: keep the last value
        async with asyncio.timeout(2.0):
            allocator.metrics.queue_depth.set(await allocator.consumer.pending())
    return web.Response(body=allocator.metrics.render(), content_type="text/plain", charset="utf-8")


async def gpus(request: web.Request) -> web.Response:
    """Every GPU of the projection (views.gpu_view), sorted by name."""
    state = _allocator(request).state
    return web.json_response([views.gpu_view(state.gpus[name]) for name in sorted(state.gpus)])


async def allocations(request: web.Request) -> web.Response:
    """Live allocations; ``?status=granted`` or ``queued`` filters."""
    status = request.query.get("status", "")
    if status not in ("", "granted", "queued"):
        return web.json_response({"error": f"status must be granted or queued, got {status!r}",
                                  "field": "status"}, status=400)
    return web.json_response(views.allocation_views(_allocator(request).state, status=status))


async def status(request: web.Request) -> web.Response:
    """The ``gpuledger status --json`` document."""
    return web.json_response(views.status_view(_allocator(request).state))


async def simulate(request: web.Request) -> web.Response:
    """Compose the posted Pod's request and decide it against the projection without changing it.

    400 ``{"error", "field"}`` when the body is not a Pod or its annotations are invalid.
    """
    try:
        pod: Any = yaml.safe_load(await request.text())
    except yaml.YAMLError as exc:
        return web.json_response({"error": f"body is not JSON or YAML: {exc}", "field": "body"}, status=400)
    if not isinstance(pod, dict):
        return web.json_response({"error": "body must be a Pod object", "field": "body"}, status=400)
    try:
        result = simulation.simulate(_allocator(request).state, pod)
    except PodSpecError as exc:
        return web.json_response({"error": str(exc), "field": exc.field}, status=400)
    return web.json_response(result)


def build_app(allocator: Allocator) -> web.Application:
    """The aiohttp application serving ``allocator``."""
    app = web.Application()
    app[ALLOCATOR_KEY] = allocator
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/gpus", gpus)
    app.router.add_get("/api/v1/allocations", allocations)
    app.router.add_get("/api/v1/status", status)
    app.router.add_post("/api/v1/simulate", simulate)
    return app


async def start(allocator: Allocator, *, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve on ``host:port`` (0 = any free port); returns the runner (``await runner.cleanup()``)
    and the bound port."""
    runner = web.AppRunner(build_app(allocator), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = int(sockets[0].getsockname()[1]) if sockets else port
    return runner, bound
