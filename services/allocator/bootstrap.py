"""Composition root of the allocator: the only place its adapters are chosen and wired.

``bootstrap(settings, teardown=..., store=, leases=, bus=, leadership=, process=, clock=)``
connects NATS (streams ensured) unless given a bus, opens the asyncpg pool unless given the
stores, builds the lease keeper, the bus's intent source and event sink and the
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

from services.allocator import domain, http
from services.allocator.adapters import database
from services.allocator.adapters.leader import LeaseKeeper
from services.allocator.adapters.nats_bus import NatsBus
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.loop import batch
from services.allocator.loop.leader import Allocator
from services.allocator.ports import Bus, Clock, EventStore, Leadership, LeaseStore, StoredEvent, utc_now
from services.allocator.settings import AllocatorSettings
from services.shared import lifecycle

log = structlog.get_logger(__name__)


def holder_identity(base: str) -> str:
    """This replica's lease holder identity: ``base`` (``GPULEDGER_HOLDER``, default the host name)
    plus a generated suffix, so two processes given the same name never share an identity."""
    return f"{base or socket.gethostname()}-{secrets.token_hex(4)}"


async def bootstrap(settings: AllocatorSettings, *, teardown: lifecycle.Teardown,
                    store: EventStore | None = None, leases: LeaseStore | None = None,
                    bus: Bus | None = None, leadership: Leadership | None = None,
                    process: batch.Process | None = None, clock: Clock = utc_now) -> Allocator:
    """Wire one allocator replica from ``settings``: the only place its adapters are chosen.

    Each keyword replaces one part (tests pass twins): ``store``/``leases`` the PostgreSQL stores,
    ``bus`` the NATS JetStream bus (:class:`~services.allocator.adapters.memory_bus.MemoryBus`),
    ``leadership`` the lease keeper over ``leases``, ``process`` ``domain.process`` with the
    loop's own Scheduler, ``clock`` the UTC clock of decisions and the lease. Raises ValueError
    when a database URL is needed and missing, and the connection errors of NATS or PostgreSQL."""
    if bus is None:
        nats = await NatsBus.connect(settings.nats_url, streams=settings.streams)
        teardown.push("nats", nats.close)  # messaging.Client: a close after the server vanished is guarded
        bus = nats
    if store is None or (leases is None and leadership is None):
        if not settings.database_url:
            raise ValueError("database_url: GPULEDGER_DATABASE_URL is not set")
        session, command_timeout = database.writer_session(settings.lease_ttl_s)
        pool = await database.create_pool(settings.database_url, server_settings=session,
                                          command_timeout=command_timeout)
        teardown.push("database pool", pool.close)
        store = store or PostgresEventStore(pool, statement_timeout_s=settings.lease_ttl_s)
        leases = leases or PostgresLeaseStore(pool)
    if leadership is None:
        assert leases is not None
        leadership = LeaseKeeper(leases, name=settings.lease_name, holder=holder_identity(settings.holder),
                                 ttl_s=settings.lease_ttl_s, renew_s=settings.lease_renew_s, clock=clock)
    allocator = Allocator(
        settings=settings, store=store, keeper=leadership,
        consumer=bus.intent_source(max_batch=settings.batch_size, ack_wait_s=settings.ack_wait_s,
                                   flush_s=settings.ack_flush_s),
        relay=bus.event_sink(store), publish=bus.publish, evolve=domain.evolve, clock=clock,
        process=process or functools.partial(domain.process, scheduler=domain.Scheduler()),
    )
    bus.on_reconnect(allocator.request_rewind)
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
                store: EventStore | None = None, leases: LeaseStore | None = None,
                bus: Bus | None = None, process: batch.Process | None = None) -> None:
    """Run one replica and its probes (``/healthz``, ``/readyz``, ``/metrics``: the API is a
    reader's, services.allocator.reader) until ``stop``; ``on_ready(allocator, http_port)`` once
    serving. ``store``/``leases``/``bus``/``process`` as in :func:`bootstrap`."""
    teardown = lifecycle.Teardown()
    try:
        if bus is None:
            nats = await NatsBus.connect(settings.nats_url, streams=settings.streams)
            teardown.push("nats", nats.close)
            bus = nats
        allocator = await bootstrap(settings, teardown=teardown, store=store, leases=leases, bus=bus,
                                    process=process)
        app = http.build_writer_app(allocator, token=http.token_from_env(), bind_host=settings.http_host)
        runner, port = await http.start(app, host=settings.http_host, port=settings.http_port,
                                        server="allocator probes")
        teardown.push("http", runner.cleanup)
        log.info("allocator serving", http=f"http://{settings.http_host}:{port}",
                 holder=allocator.keeper.holder)
        if on_ready is not None:
            on_ready(allocator, port)
        await allocator.run(stop)
    finally:
        await teardown.close()
