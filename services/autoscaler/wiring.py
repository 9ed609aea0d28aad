"""The autoscaler service: NATS in and out around the pure :class:`Engine`.

``run_autoscaler(settings, stop)`` connects, restores the checkpoints, replays
``GPULEDGER_EVENTS`` (an ordered JetStream consumer) until it has caught up, then runs until
``stop``: usage samples from ``gpuledger.metrics.>`` (and Prometheus when configured), one
evaluation per due workload every tick, ResizeAllocation intents through
``messaging.publish_intent``, capped retries on ResizeRejected, checkpoints to the KV bucket,
and answers ``gpuledger recommend`` on ``gpuledger.autoscaler.recommend`` (request/reply).
Everything runs on one event loop, so the engine is never touched concurrently.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from events import bounds, codec, guard, intents, subjects
from services.autoscaler import checkpoint, external, sources
from services.autoscaler.engine import Engine
from services.autoscaler.report import report_of
from services.autoscaler.settings import AutoscalerSettings
from services.autoscaler.view import WorkloadKey
from services.shared import lifecycle, messaging
from services.shared import settings as shared_settings

log = structlog.get_logger("gpuledger.autoscaler")

RECOMMEND_SUBJECT = subjects.AUTOSCALER_RECOMMEND_SUBJECT
"""Request/reply subject of ``gpuledger recommend WORKLOAD``: ``{"workload", "namespace"}`` in."""
Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class AutoscalerRuntime:
    """The engine wired to NATS: event follower, sample intake, ticker, checkpointer, request handler."""

    def __init__(self, settings: AutoscalerSettings, *, nc: NatsClient, js: JetStreamContext, kv: KeyValue,
                 clock: Clock = _utcnow) -> None:
        self.settings, self.nc, self.js, self.kv, self.clock = settings, nc, js, kv, clock
        self.engine = Engine(new_id=lambda: f"autoscale-{uuid.uuid4()}",
                             interval=timedelta(seconds=settings.autoscaler_interval_s),
                             default_tz=settings.zone(), max_retries=settings.autoscaler_max_retries,
                             tensorfusion_vram_timing=settings.autoscaler_tensorfusion_vram_timing)
        self.engine.tracker.retry_after = timedelta(seconds=settings.autoscaler_retry_after_s)
        self.caught_up = asyncio.Event()
        self.stopping = asyncio.Event()
        """Set when the runtime stops: the event follower ends on it even if its cancellation was
        lost (Python 3.11's ``asyncio.wait_for``, which nats-py's requests use, can swallow one)."""
        self.published = 0
        self._target_seq = 0

    async def publish(self, resizes: list[intents.ResizeAllocation]) -> None:
        """Publish resize intents (each with its own intent id)."""
        for intent in resizes:
            await messaging.publish_intent(self.js, intent)
            self.published += 1
            log.info("resize published", allocation_id=intent.allocation_id, intent_id=intent.intent_id,
                     tflops=intent.request.milli_tflops, vram=intent.request.vram_bytes)

    async def follow_events(self) -> None:
        """Replay then tail GPULEDGER_EVENTS until ``stopping`` is set; sets ``caught_up`` once the
        replay reached the end (at once, once subscribed, when the stream is empty)."""
        info = await self.js.stream_info(subjects.EVENT_STREAM)
        self._target_seq = info.state.last_seq
        sub = await messaging.subscribe_events(self.js, cb=self._on_event_msg)
        if self._target_seq == 0:
            self.caught_up.set()
        try:
            await self.stopping.wait()
        finally:
            await sub.unsubscribe()

    async def _on_event_msg(self, msg: Msg) -> None:
        try:
            event = codec.decode_event(msg.data)
        except codec.DecodeError as exc:
            log.warning("event skipped", subject=msg.subject, error=str(exc))
        else:
            retries = self.engine.on_event(event, now=self.clock())
            if self.caught_up.is_set():
                await self.publish(retries)
        if msg.metadata.sequence.stream >= self._target_seq:
            self.caught_up.set()

    async def _on_sample_msg(self, msg: Msg) -> None:
        sources.take_message(self.engine, msg.data, subject=msg.subject)

    async def consume_samples(self) -> None:
        """Subscribe to ``gpuledger.metrics.>`` (core NATS; samples are fire-and-forget)."""
        sub = await self.nc.subscribe(f"{subjects.METRICS_SUBJECT_PREFIX}.>", cb=self._on_sample_msg)
        try:
            await asyncio.Future()
        finally:
            await sub.unsubscribe()

    async def tick(self) -> None:
        """Every ``autoscaler_tick_s``: evaluate the due workloads and publish their resizes."""
        async with aiohttp.ClientSession() as session:
            while True:
                now = self.clock()
                for key in self.engine.due(now):
                    answer = await self._ask_external(session, key, now)
                    await self.publish(self.engine.evaluate(key, now=now, answer=answer))
                await asyncio.sleep(self.settings.autoscaler_tick_s)

    async def _ask_external(self, session: aiohttp.ClientSession, key: WorkloadKey, now: datetime
                            ) -> external.ExternalAnswer | external.ExternalError | None:
        scaler = self.engine.external_scaler(key, now=now)
        if scaler is None:
            return None
        secrets = Path(self.settings.autoscaler_secrets_dir) if self.settings.autoscaler_secrets_dir else None
        try:
            return await external.ask(session, scaler, workload=key[1], namespace=key[0],
                                      current=self.engine.current_of(key), secrets_dir=secrets)
        except external.ExternalError as exc:
            return exc

    async def checkpoint_loop(self) -> None:
        """Save changed workloads every ``autoscaler_checkpoint_every_s``."""
        while True:
            await asyncio.sleep(self.settings.autoscaler_checkpoint_every_s)
            await self.save()

    async def save(self) -> int:
        """Write the changed workloads' checkpoints now."""
        keys, self.engine.touched = sorted(self.engine.touched), set()
        return await checkpoint.save(self.kv, self.engine, keys)

    async def prometheus_loop(self) -> None:
        """Poll Prometheus every ``autoscaler_prometheus_interval_s``; a failed poll is logged and retried."""
        s = self.settings
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    await sources.poll_prometheus(self.engine, session, url=s.autoscaler_prometheus_url,
                                                  tflops_query=s.autoscaler_prometheus_tflops_query,
                                                  vram_query=s.autoscaler_prometheus_vram_query)
                except (aiohttp.ClientError, TimeoutError, sources.PrometheusError) as exc:
                    log.warning("prometheus poll failed", error=str(exc))
                await asyncio.sleep(s.autoscaler_prometheus_interval_s)

    async def serve_requests(self) -> None:
        """Answer ``gpuledger recommend`` requests until cancelled."""
        sub = await self.nc.subscribe(RECOMMEND_SUBJECT, cb=self._on_request)
        try:
            await asyncio.Future()
        finally:
            await sub.unsubscribe()

    async def _on_request(self, msg: Msg) -> None:
        try:
            body = msgspec.json.decode(guard.check_payload(msg.data, limit=4096)) if msg.data else {}
            reply = self.report(str(body.get("workload", "")), namespace=str(body.get("namespace", "")))
        except (ValueError, AttributeError) as exc:  # msgspec.DecodeError and BoundsError are ValueErrors
            reply = {"error": f"bad request: {bounds.echo(str(exc), 512)}", "field": "workload"}
        await msg.respond(msgspec.json.encode(reply))

    def report(self, workload: str, *, namespace: str = "") -> dict[str, Any]:
        """The report of one workload, or ``{"error", "field"}`` when unknown or ambiguous."""
        return report_of(self.engine, workload, namespace=namespace)


async def run_autoscaler(settings: AutoscalerSettings, stop: asyncio.Event | None = None, *,
                         on_ready: Callable[[AutoscalerRuntime], None] | None = None, clock: Clock = _utcnow) -> None:
    """Run the autoscaler until ``stop`` is set (forever when None); ``gpuledger up`` starts this."""
    stop = stop or asyncio.Event()
    teardown = lifecycle.Teardown()
    try:
        nc = await messaging.connect(settings.nats_url, name="gpuledger-autoscaler")
        teardown.push("nats", nc.drain)
        js = nc.jetstream()
        await messaging.ensure_streams(js)
        kv = await checkpoint.open_bucket(await _checkpoint_jetstream(settings, js, teardown),
                                          settings.autoscaler_checkpoint_bucket)
        runtime = AutoscalerRuntime(settings, nc=nc, js=js, kv=kv, clock=clock)
        loaded = await checkpoint.load(kv, runtime.engine)
        teardown.push("checkpoint", runtime.save)
        await _start(runtime, stop, loaded, on_ready)
    finally:
        await teardown.close()


async def _checkpoint_jetstream(settings: AutoscalerSettings, js: JetStreamContext,
                                teardown: lifecycle.Teardown) -> JetStreamContext:
    """Where the checkpoint bucket lives: ``js`` (the service's own connection), or, when
    ``autoscaler_checkpoint_nats_user`` is set, a second connection as that user (same URL,
    password and TLS; deploy/base/auth.conf keeps the bucket in an account of its own)."""
    if not settings.autoscaler_checkpoint_nats_user:
        return js
    security = msgspec.structs.replace(shared_settings.nats_security(), user=settings.autoscaler_checkpoint_nats_user)
    client = await messaging.connect(settings.nats_url, name="gpuledger-autoscaler-checkpoints", security=security)
    teardown.push("nats checkpoints", client.drain)
    return client.jetstream()


async def _start(runtime: AutoscalerRuntime, stop: asyncio.Event, loaded: int,
                 on_ready: Callable[[AutoscalerRuntime], None] | None) -> None:
    follower = asyncio.create_task(runtime.follow_events())
    try:
        await asyncio.wait_for(runtime.caught_up.wait(), runtime.settings.autoscaler_catch_up_timeout_s)
    except TimeoutError:
        log.warning("event replay still running; starting anyway")
    log.info("autoscaler running", checkpoints=len(runtime.engine.aggregators), loaded=loaded,
             workloads=len(runtime.engine.view.workloads()))
    if on_ready is not None:
        on_ready(runtime)
    loops = [runtime.consume_samples(), runtime.tick(), runtime.checkpoint_loop(), runtime.serve_requests()]
    if runtime.settings.autoscaler_prometheus_url:
        loops.append(runtime.prometheus_loop())
    try:
        await lifecycle.supervise(stop, *loops)
    finally:
        runtime.stopping.set()
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
