"""run_admission(): the admission process (webhook + watches + binder), as ``gpuledger admission`` and
``gpuledger up`` start it.

Composition root of this area: connects NATS, builds the ClusterView, serves the webhook over
HTTPS, and (``settings.kube``) runs the WorkloadProfile/GPUResourceQuota/GPUShare watches and the binder
against the Kubernetes API, and (``settings.allocator_url``) the GPUResourceQuota and GPUShare status
writers (one period, ``quota_status_period_s``).
Without Kubernetes it still follows GPULEDGER_EVENTS so the view knows GPU models
(dedicated-gpu) and pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from nats.js import JetStreamContext

from events import codec, subjects
from events.base import Intent
from services.admission import quota_sync, share_status, tls, watches
from services.admission.binder import Binder
from services.admission.book import AllocationBook
from services.admission.settings import AdmissionSettings
from services.admission.view import ClusterView
from services.admission.webhook import build_app
from services.podspec import PoolDefaults
from services.shared import http_edge, kube, messaging

log = structlog.get_logger("gpuledger.admission")


def resolve_tls(settings: AdmissionSettings) -> tuple[Path, Path]:
    """The configured PEM pair, or a self-signed one generated into ``cert_dir`` (or a temp dir)."""
    if settings.cert_file and settings.key_file:
        return Path(settings.cert_file), Path(settings.key_file)
    directory = Path(settings.cert_dir or tempfile.mkdtemp(prefix="gpuledger-admission-"))
    hosts = list(
        dict.fromkeys([settings.host if settings.host != "0.0.0.0" else "localhost", "localhost", "127.0.0.1"])
    )
    return tls.generate_self_signed(directory, hosts=hosts)


async def follow_view(js: JetStreamContext, *, view: ClusterView) -> None:
    """Fold GPULEDGER_EVENTS (from the start) into ``view`` only: GPU models, pools and their
    enforcement; ``view.replayed`` once the stream's last event at start is folded."""
    book = AllocationBook()
    last = (await js.stream_info(subjects.EVENT_STREAM)).state.last_seq
    view.replayed = view.replayed or last == 0
    sub = await messaging.subscribe_events(js)
    async for msg in sub.messages:
        try:
            book.apply(codec.decode_event(msg.data), view=view)
        except codec.DecodeError:
            continue
        finally:
            view.replayed = view.replayed or msg.metadata.sequence.stream >= last
        book.granted.clear()


async def run_admission(
    settings: AdmissionSettings, *, on_ready: Callable[[str], None] | None = None, stop: asyncio.Event | None = None
) -> None:
    """Serve until ``stop`` is set (or cancelled); ``on_ready`` receives the https base URL once listening."""
    cert, key = resolve_tls(settings)
    client = await messaging.connect(settings.nats_url, name="gpuledger-admission")
    js = client.jetstream()
    view = ClusterView(
        pool=PoolDefaults(
            name=settings.default_pool, default_qos=settings.default_qos, local_gpu=settings.default_local_gpu
        ),
        replayed=False,  # until the event replay has caught up (pool enforcement): reviews answer 503
    )

    async def publish(intent: Intent) -> int:
        return await messaging.publish_intent(js, intent, timeout=settings.publish_timeout_s)

    app = build_app(view=view, publish=publish, failure_policy=settings.failure_policy,
                    publish_timeout_s=settings.publish_timeout_s, token=settings.webhook_token)
    client_ca = Path(settings.client_ca_file) if settings.client_ca_file else None
    # the connection guard, deadlines and quiet error log of services/shared/http_edge.py
    runner, port, _ = await http_edge.serve(app, host=settings.host, port=settings.port, server="admission webhook",
                                            ssl_context=tls.server_context(cert, key_file=key, client_ca=client_ca))
    try:
        url = f"https://{settings.host}:{port}"
        log.info("webhook_listening", url=url, cert=str(cert), bearer_token=bool(settings.webhook_token),
                 client_certificate=bool(client_ca))
        if on_ready is not None:
            on_ready(url)
        await _until_stopped(_background(settings, js=js, view=view, publish=publish), stop)
    finally:
        await runner.cleanup()
        await client.drain()


async def _until_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event | None) -> None:
    """Run ``work`` until it ends (its error propagates) or ``stop`` is set (it is cancelled)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait() if stop is not None else asyncio.Event().wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stopper):
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


async def _background(
    settings: AdmissionSettings, *, js: JetStreamContext, view: ClusterView, publish: watches.PublishIntent
) -> None:
    if not settings.kube:
        await follow_view(js, view=view)
        return
    api = await kube.api_client(kubeconfig=settings.kubeconfig)
    session = aiohttp.ClientSession()
    try:
        binder = Binder(api, publish=publish, view=view, namespace=settings.namespace)
        tracker = watches.QuotaTracker(view)
        async with asyncio.TaskGroup() as group:
            group.create_task(binder.run(js))
            group.create_task(watches.watch_profiles(api, view=view, namespace=settings.namespace))
            group.create_task(watches.watch_quotas(api, view=view, publish=publish, namespace=settings.namespace,
                                                   tracker=tracker))
            shares = watches.ShareTracker()
            if settings.allocator_url:
                fetch = quota_sync.api_reader(session, settings.allocator_url, token=settings.api_token)
                group.create_task(quota_sync.sync_forever(api, tracker=tracker, fetch=fetch,
                                                          period_s=settings.quota_status_period_s))
                group.create_task(share_status.sync_forever(
                    api, tracker=shares, fetch=share_status.api_reader(session, settings.allocator_url,
                                                                        token=settings.api_token),
                    period_s=settings.quota_status_period_s))
            group.create_task(watches.watch_priority_classes(api, view=view))
            group.create_task(watches.watch_shares(api, publish=publish, tracker=shares))
    finally:
        await session.close()
        await api.close()
