"""Unauthenticated routes for probes and scrapers: ``/healthz``, ``/readyz``, ``/metrics``, of the
writer (``gpuledger allocator``) and of a reader (``gpuledger api``).

They stay open when ``GPULEDGER_API_TOKEN`` is set (a kubelet probe or a Prometheus scrape has no
token); they disclose no tenant data: health, role/epoch/position, lag, and per-pool totals.

The writer's ``/metrics`` has the loop's instruments (decisions, latency, lease, position); a
reader's has the per-pool and per-namespace gauges read from its projection at scrape time plus
``gpuledger_reader_position`` (last log position applied), ``gpuledger_reader_log_head`` (newest
log position seen) and ``gpuledger_reader_lag_events`` (their difference).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from services.allocator.api import gauges, quota_gauges, share_gauges
from services.allocator.api.context import allocator_of, follower_of
from services.allocator.api.follower import Follower

STALE_AFTER_S = 30.0
"""A reader whose reads of the log have failed this long answers ``/readyz`` 503."""


async def healthz(request: web.Request) -> web.Response:
    """Liveness: always ``{"status": "ok"}`` while the event loop answers."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """The writer's readiness: 200 with the role once the projection is loaded (leader or standby), else 503."""
    allocator = allocator_of(request)
    body = {"role": allocator.keeper.role, "epoch": allocator.keeper.epoch,
            "position": allocator.state.position, "holder": allocator.keeper.holder}
    return web.json_response(body, status=200 if allocator.loaded.is_set() and not allocator.stuck else 503)


async def metrics(request: web.Request) -> web.Response:
    """The writer's Prometheus text; ``gpuledger_intents_pending`` is read from JetStream at scrape
    time (within 2 s; the last value is kept when NATS does not answer)."""
    allocator = allocator_of(request)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(2.0):
            allocator.metrics.intents_pending.set(await allocator.consumer.pending())
    return web.Response(body=allocator.metrics.render(), content_type="text/plain", charset="utf-8")


def reader_status(follower: Follower) -> dict[str, object]:
    """``{"role": "reader", "position", "head", "lag"}``: how far the reader's projection is behind the log."""
    return {"role": "reader", "position": follower.state.position, "head": follower.head, "lag": follower.lag}


async def reader_readyz(request: web.Request) -> web.Response:
    """A reader's readiness: 200 once its projection is loaded and its reads of the log have not
    failed for :data:`STALE_AFTER_S`; the body says how far behind it is (:func:`reader_status`)."""
    follower = follower_of(request)
    failing = follower.failed_since is not None and time.monotonic() - follower.failed_since > STALE_AFTER_S
    ready = follower.loaded.is_set() and not failing
    return web.json_response(reader_status(follower), status=200 if ready else 503)


class ReaderMetrics:
    """A reader's registry: the lag gauges and the pool/quota gauges of its projection."""

    def __init__(self, follower: Follower) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Gauge("gpuledger_reader_position", "Last log position applied to the reader's projection",
              registry=r).set_function(lambda: follower.state.position)
        Gauge("gpuledger_reader_log_head", "Newest log position the reader has seen",
              registry=r).set_function(lambda: follower.head)
        Gauge("gpuledger_reader_lag_events", "Log events the reader has not applied yet (head minus position)",
              registry=r).set_function(lambda: follower.lag)
        r.register(gauges.PoolCollector(lambda: follower.state))
        r.register(quota_gauges.QuotaCollector(lambda: follower.state))
        r.register(share_gauges.ShareCollector(lambda: follower.state))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


READER_METRICS_KEY = web.AppKey("reader_metrics", ReaderMetrics)


async def reader_metrics(request: web.Request) -> web.Response:
    """A reader's Prometheus text (:class:`ReaderMetrics`)."""
    return web.Response(body=request.app[READER_METRICS_KEY].render(), content_type="text/plain", charset="utf-8")
