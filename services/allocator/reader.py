"""Composition root of a reader (``gpuledger api``, ``python -m services.allocator.reader``).

A reader serves the HTTP API, the dashboard, simulate, why, the queue's current reasons and the
pool gauges from its own projection (:class:`~services.allocator.api.follower.Follower`), which
follows the event log by position, apart from the writer (``gpuledger allocator``): nothing a
client asks of a reader can pause the writer's decision loop or its lease renewal. Writes are
published to NATS as intents, as from any producer, and answered with their decision
(:class:`~services.allocator.api.outcomes.OutcomeWaiter`). Readers share nothing but PostgreSQL
and NATS, so any number of them may run (docs/operations.md "Readers").

``read_root(settings, teardown=...)`` connects NATS and PostgreSQL and builds the application;
``serve_reader(settings, stop)`` runs it until ``stop``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Mapping

import msgspec
import structlog
from aiohttp import web

from services.allocator import http
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.api.follower import Follower
from services.allocator.api.outcomes import OutcomeWaiter
from services.allocator.ports import EventStore, History
from services.shared import lifecycle, logs, messaging
from services.shared import settings as shared_settings

log = structlog.get_logger(__name__)


class ReaderSettings(msgspec.Struct, kw_only=True):
    """Reader settings, read from ``GPULEDGER_*`` variables (field ``foo`` reads ``GPULEDGER_FOO``).

    - ``database_url``: PostgreSQL (``GPULEDGER_DATABASE_URL``), required: the log it follows.
    - ``nats_url``: NATS, where writes are published as intents and their decisions come back.
    - ``http_host``/``http_port``: the HTTP API (port 0 = any free port).
    - ``poll_s``: seconds between two reads of the log when nothing new came (> 0); the reader
      is at most about this far behind the writer's commits.
    - ``pool_size``: PostgreSQL connections of this reader (>= 2: the follower and the History).
    - ``nice``: added to the process's niceness at start (0-19; default 5, 0 to keep the parent's):
      on a machine it shares with the writer (``gpuledger up``, a laptop, a shared VM), reads then
      yield the CPU to decisions (BENCHMARKS.md "Read load": the writer's decision p99 1.59x with
      the reader at 0, 0.84-0.99x at 5, on 2 cores); in its own pod it changes nothing.
    """

    database_url: str = ""
    nats_url: str = "nats://127.0.0.1:4222"
    http_host: str = "127.0.0.1"
    http_port: int = 8480
    poll_s: float = 0.05
    pool_size: int = 4
    nice: int = 5
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.poll_s <= 60:
            raise msgspec.ValidationError(f"poll_s must be seconds in (0, 60], got {self.poll_s}")
        if self.pool_size < 2:
            raise msgspec.ValidationError(f"pool_size must be >= 2, got {self.pool_size}")
        if not 0 <= self.nice <= 19:
            raise msgspec.ValidationError(f"nice must be 0 to 19, got {self.nice}")


def load(environ: Mapping[str, str] | None = None) -> ReaderSettings:
    """Settings from defaults and ``GPULEDGER_*`` variables; raises SettingsError naming a bad one."""
    return shared_settings.load(ReaderSettings, environ=environ)


@dataclasses.dataclass(frozen=True)
class Reader:
    """What :func:`read_root` built: the projection, the History port and the application."""

    follower: Follower
    history: History
    app: web.Application


async def read_root(settings: ReaderSettings, *, teardown: lifecycle.Teardown,
                    store: EventStore | None = None, history: History | None = None) -> Reader:
    """Wire one reader from ``settings``; ``store``/``history`` replace PostgreSQL (tests pass the
    in-memory twin for both). Raises ValueError when the database URL is needed and missing, and
    the connection errors of NATS or PostgreSQL."""
    if store is None or history is None:
        if not settings.database_url:
            raise ValueError("database_url: GPULEDGER_DATABASE_URL is not set")
        pool = await database.create_pool(settings.database_url, max_size=settings.pool_size)
        teardown.push("database pool", pool.close)
        postgres = PostgresEventStore(pool)
        store, history = store or postgres, history or postgres
    nc = await messaging.connect(settings.nats_url, name="gpuledger-api")
    teardown.push("nats", nc.close)
    follower = Follower(store, poll_s=settings.poll_s)
    app = http.build_app(follower, history, waiter=OutcomeWaiter(nc), token=http.token_from_env(),
                         bind_host=settings.http_host)
    return Reader(follower=follower, history=history, app=app)


async def serve_reader(settings: ReaderSettings, stop: asyncio.Event, *,
                       on_ready: Callable[[Reader, int], None] | None = None,
                       store: EventStore | None = None, history: History | None = None) -> None:
    """Run one reader until ``stop``; ``on_ready(reader, http_port)`` once serving (its projection
    may still be loading: ``/readyz`` says when it is)."""
    teardown = lifecycle.Teardown()
    try:
        reader = await read_root(settings, teardown=teardown, store=store, history=history)
        runner, port = await http.start(reader.app, host=settings.http_host, port=settings.http_port,
                                        server="reader API")
        teardown.push("http", runner.cleanup)
        log.info("reader serving", http=f"http://{settings.http_host}:{port}")
        if on_ready is not None:
            on_ready(reader, port)
        await reader.follower.run(stop)
    finally:
        await teardown.close()


def main() -> None:
    """Run one reader until SIGTERM/SIGINT (exit 0 after a clean stop)."""
    config = load()
    logs.setup(config.log_level, json=config.log_json)
    if config.nice:
        os.nice(config.nice)

    async def run(stop: asyncio.Event) -> None:
        await serve_reader(config, stop)

    lifecycle.run_service(run)


if __name__ == "__main__":
    main()
