"""Unauthenticated routes for probes and scrapers: ``/healthz``, ``/readyz``, ``/metrics``.

They stay open when ``GPULEDGER_API_TOKEN`` is set (a kubelet probe or a Prometheus scrape has no
token); they disclose no tenant data: health, role/epoch/position, and per-pool totals.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from services.allocator.api.context import allocator_of


async def healthz(request: web.Request) -> web.Response:
    """Liveness: always ``{"status": "ok"}`` while the event loop answers."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 with the role once the projection is loaded (leader or standby), else 503."""
    allocator = allocator_of(request)
    body = {"role": allocator.keeper.role, "epoch": allocator.keeper.epoch,
            "position": allocator.state.position, "holder": allocator.keeper.holder}
    return web.json_response(body, status=200 if allocator.loaded.is_set() and not allocator.stuck else 503)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format; ``gpuledger_intents_pending`` is read from JetStream at scrape time
    (within 2 s; the last value is kept when NATS does not answer)."""
    allocator = allocator_of(request)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(2.0):
            allocator.metrics.intents_pending.set(await allocator.consumer.pending())
    return web.Response(body=allocator.metrics.render(), content_type="text/plain", charset="utf-8")
