"""Composition root of the allocator: the only place its adapters are chosen and wired.

``bootstrap(settings, teardown=...)`` connects NATS (streams ensured), opens the asyncpg pool,
builds the PostgreSQL event and lease stores, the lease keeper, the consumer, the relay and the
:class:`Allocator`; every resource registers its closer on ``teardown``. ``serve(settings, stop)``
runs one replica with its probes until ``stop`` is set. The reader process (``gpuledger api``)
has its own composition root, :mod:`services.allocator.reader`.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import socket
from collections.abc import Callable, Sequence

import structlog

from events import intents
from services.allocator import domain, http
from services.allocator.adapters import database
from services.allocator.adapters.consumer import IntentConsumer
from services.allocator.adapters.leader import LeaseKeeper
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.adapters.relay import EventRelay
from services.allocator.loop.leader import Allocator
from services.allocator.ports import EventStore, LeaseStore, StoredEvent
from services.allocator.settings import AllocatorSettings
from services.shared import lifecycle, messaging

log = structlog.get_logger(__name__)


def holder_identity(base: str) -> str:
    """This replica's lease holder identity: ``base`` (``GPULEDGER_HOLDER``, default the host name)
    plus a generated suffix, so two processes given the same name never share an identity."""
    return f"{base or socket.gethostname()}-{secrets.token_hex(4)}"


async def bootstrap(settings: AllocatorSettings, *, teardown: lifecycle.Teardown,
                    store: EventStore | None = None, leases: LeaseStore | None = None) -> Allocator:
    """Wire one allocator replica from ``settings``; ``store``/``leases`` replace the PostgreSQL
    adapters (tests pass the in-memory twins). Raises ValueError when a database URL is needed
    and missing, and the connection errors of NATS or PostgreSQL."""
    on_reconnect: list[Callable[[], None]] = []

    async def reconnected() -> None:
        log.info("reconnected to NATS")
        for callback in on_reconnect:
            callback()

    nc = await messaging.connect(settings.nats_url, name="gpuledger-allocator", reconnected_cb=reconnected)
    teardown.push("nats", nc.close)  # messaging.Client: a close after the server vanished is guarded
    js = nc.jetstream()
    await messaging.ensure_streams(js, settings.streams)
    if store is None or leases is None:
        if not settings.database_url:
            raise ValueError("database_url: GPULEDGER_DATABASE_URL is not set")
        session, command_timeout = database.writer_session(settings.lease_ttl_s)
        pool = await database.create_pool(settings.database_url, server_settings=session,
                                          command_timeout=command_timeout)
        teardown.push("database pool", pool.close)
        store = store or PostgresEventStore(pool, statement_timeout_s=settings.lease_ttl_s)
        leases = leases or PostgresLeaseStore(pool)
    keeper = LeaseKeeper(leases, name=settings.lease_name, holder=holder_identity(settings.holder),
                         ttl_s=settings.lease_ttl_s, renew_s=settings.lease_renew_s)

    async def publish(intent: intents.AnyIntent) -> int:
        return await messaging.publish_intent(js, intent)

    allocator = Allocator(
        settings=settings, store=store, keeper=keeper,
        consumer=IntentConsumer(nc, max_batch=settings.batch_size, ack_wait_s=settings.ack_wait_s,
                                flush_s=settings.ack_flush_s),
        relay=EventRelay(nc, store), publish=publish, evolve=domain.evolve,
        process=functools.partial(domain.process, scheduler=domain.Scheduler()),
    )
    on_reconnect.append(allocator.request_rewind)
    allocator.listeners.append(functools.partial(_count_outcomes, allocator))
    return allocator


def _count_outcomes(allocator: Allocator, stored: Sequence[StoredEvent]) -> None:
    """Commit listener: the outcome counters of ``/metrics``; logs instead of raising (it runs
    inside the commit path)."""
    try:
        allocator.metrics.record_outcomes(stored, allocator.state)
    except Exception:
        log.exception("counting the outcomes of a commit failed")


async def serve(settings: AllocatorSettings, stop: asyncio.Event,
                *, on_ready: Callable[[Allocator, int], None] | None = None,
                store: EventStore | None = None, leases: LeaseStore | None = None) -> None:
    """Run one replica and its probes (``/healthz``, ``/readyz``, ``/metrics``: the API is a
    reader's, services.allocator.reader) until ``stop``; ``on_ready(allocator, http_port)`` once
    serving. ``store``/``leases`` as in :func:`bootstrap`."""
    teardown = lifecycle.Teardown()
    try:
        allocator = await bootstrap(settings, teardown=teardown, store=store, leases=leases)
        app = http.build_writer_app(allocator, token=http.token_from_env())
        runner, port = await http.start(app, host=settings.http_host, port=settings.http_port)
        teardown.push("http", runner.cleanup)
        log.info("allocator serving", http=f"http://{settings.http_host}:{port}",
                 holder=allocator.keeper.holder)
        if on_ready is not None:
            on_ready(allocator, port)
        await allocator.run(stop)
    finally:
        await teardown.close()
