"""``gpuledger up``: the whole stack in one process tree, under one data directory.

Starts nats-server (``D/nats``) and PostgreSQL (``D/postgres``, database ``gpuledger``), both on
127.0.0.1 with generated passwords (``D/secrets/``, mode 0600, carried by the URLs), generates
the API token ``D/secrets/api-token`` (unless ``GPULEDGER_API_TOKEN``/``_FILE`` is set or the
caller opted out with ``api_token=False``; the CLI reads it from there), migrates,
runs the allocator (the writer) in this process and one reader (``gpuledger api``, the HTTP API
and the dashboard) as a child process (services.cli.reader_child), starts the optional services
that are installed (each is imported lazily and skipped with a log line when absent), loads the demo inventory, writes
``D/endpoints.json`` and prints ``gpuledger is up``; on SIGINT/SIGTERM everything stops in
reverse order. Running it again on the same directory resumes the same log and stream.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import structlog
from rich.console import Console

from events import intents
from services.allocator import bootstrap, http
from services.allocator.adapters import database
from services.allocator.loop.leader import Allocator
from services.allocator.settings import AllocatorSettings
from services.cli import endpoints, reader_child
from services.shared import lifecycle, messaging, secretfile
from services.shared.natsserver import NatsServer, password_config
from services.shared.pgserver import PgServer
from services.shared.settings import redact_url

log = structlog.get_logger(__name__)

DATABASE = "gpuledger"
NATS_USER = "gpuledger"
"""The one NATS user of the embedded server; its password is ``D/secrets/nats-password``."""
DEFAULT_INVENTORY = Path(__file__).resolve().parents[2] / "data/openb/openb_node_list_gpu_node.csv"

OPTIONAL_SERVICES: tuple[tuple[str, str, str], ...] = (
    ("admission webhook", "services.admission.embedded", "run"),
    ("discovery", "services.discovery.embedded", "run"),
    ("autoscaler", "services.autoscaler.embedded", "run"),
)
"""(label, module, coroutine function): ``await fn(stop, endpoints=...) -> dict of extra URLs``
is run as a task; a module that is not installed is skipped."""


class UpOptions(msgspec.Struct, kw_only=True):
    """Options of ``gpuledger up``: data dir, inventory file (None: the demo), the HTTP API's port
    (the reader's; the writer's probes take a free one), and the inventory's nodes when the caller
    read it already (None: read at load time); ``api_token`` False serves the API and dashboard
    without a token (``up --no-token``)."""

    data_dir: Path
    inventory: Path | None = None
    http_port: int = 0
    nodes: list[intents.RegisterNode] | None = None
    api_token: bool = True
    json_out: bool = False
    """``up --json``: once up, one JSON line on stdout (:func:`up_document`); text goes to stderr."""


def ensure_api_token(data_dir: Path, *, wanted: bool) -> Path | None:
    """The file holding the API token this stack serves with: ``D/secrets/api-token`` (generated
    once, mode 0600) exported as ``GPULEDGER_API_TOKEN_FILE`` for the servers of this process; None
    when the environment already names a token (it is used as is) or ``wanted`` is False."""
    if os.environ.get(http.TOKEN_ENV) or os.environ.get(http.TOKEN_FILE_ENV) or not wanted:
        return None
    path = data_dir / "secrets" / endpoints.API_TOKEN_SECRET
    secretfile.ensure(path)
    os.environ[http.TOKEN_FILE_ENV] = str(path)
    return path


def ensure_database(server: PgServer, name: str = DATABASE) -> str:
    """Create database ``name`` unless it exists; returns its URL."""
    with psycopg.connect(database.asyncpg_dsn(server.url()), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return server.url(name) if exists else server.create_database(name)


def load_inventory(path: Path) -> list[intents.RegisterNode]:
    """RegisterNode intents of ``path`` via the discovery area's static loader."""
    static = importlib.import_module("services.discovery.static")
    nodes: list[intents.RegisterNode] = static.load_inventory(path)
    return nodes


async def _publish_inventory(allocator: Allocator, nodes: list[intents.RegisterNode], *,
                             nats_url: str, console: Console) -> None:
    from services.cli.progress import Meter

    client = await messaging.connect(nats_url, name="gpuledger-up")
    try:
        js = client.jetstream()
        with Meter("loading inventory", len(nodes)) as meter:
            for node in nodes:
                await messaging.publish_intent(js, node)
            ids = [node.intent_id for node in nodes]
            while (done := len(await allocator.store.processed(ids))) < len(ids):
                meter.update(done, "nodes registered")
                await asyncio.sleep(0.2)
    finally:
        await client.close()


async def _start_optional(stop: asyncio.Event, found: endpoints.Endpoints,
                          tasks: list[asyncio.Task[Any]]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for label, module_name, attr in OPTIONAL_SERVICES:
        try:
            entry: Callable[..., Coroutine[Any, Any, Any]] = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError):
            log.info("service not available; skipped", service=label, module=module_name)
            continue
        ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(entry(stop, endpoints=found, ready=ready))
        try:
            async with asyncio.timeout(60):
                urls.update(await ready)
        except Exception as exc:  # one optional service failing must not take the stack down
            log.warning("service failed to start; skipped", service=label, error=repr(exc))
            task.cancel()
            continue
        tasks.append(task)
    return urls


async def run_up(options: UpOptions, stop: asyncio.Event, *, console: Console) -> endpoints.Endpoints:
    """Run the stack until ``stop`` is set; returns the endpoints it served."""
    data_dir = options.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    teardown = lifecycle.Teardown()
    tasks: list[asyncio.Task[Any]] = []
    inner_stop = asyncio.Event()
    try:
        with console.status("starting nats-server and PostgreSQL"):
            nats_password = secretfile.ensure(data_dir / "secrets" / "nats-password")
            nats_server = NatsServer(data_dir / "nats", config=password_config(NATS_USER, nats_password))
            await asyncio.to_thread(nats_server.start)
            teardown.push("nats-server", lambda: asyncio.to_thread(nats_server.stop))
            nats_url = nats_server.url_for(NATS_USER, nats_password)
            pg_password = secretfile.ensure(data_dir / "secrets" / "postgres-password")
            pg = PgServer(data_dir / "postgres", password=pg_password)
            await asyncio.to_thread(pg.start)
            teardown.push("postgres", lambda: asyncio.to_thread(pg.stop))
            database_url = await asyncio.to_thread(ensure_database, pg)
            await asyncio.to_thread(database.upgrade, database_url)
            token_file = ensure_api_token(data_dir, wanted=options.api_token)
        settings = AllocatorSettings(database_url=database_url, nats_url=nats_url, http_port=0,
                                     holder="gpuledger-up")
        allocator, port = await _start_allocator(settings, inner_stop, tasks)
        with console.status("starting the reader (gpuledger api)"):
            reader = await reader_child.start(database_url=database_url, nats_url=nats_url,
                                              port=options.http_port, data_dir=data_dir)
        teardown.push("reader", reader.stop)
        found = endpoints.Endpoints(nats_url=nats_url, database_url=database_url, allocator_http=reader.url,
                                    writer_http=f"http://127.0.0.1:{port}")
        extra = await _start_optional(inner_stop, found, tasks)
        found.webhook_https = extra.get("webhook_https", "")
        await _load_demo(allocator, options, found, console)
        await reader.wait_position(allocator.state.position)  # the first command sees the inventory
        endpoints.write(data_dir, found)
        _print_urls(console, found, data_dir, token_file=token_file, open_api=not options.api_token)
        if options.json_out:
            print(json.dumps(up_document(found, data_dir)), flush=True)
        await _until_stopped(stop, tasks[0], reader)
        return found
    finally:
        inner_stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=15)
        await teardown.close(timeout_s=60)


async def _until_stopped(stop: asyncio.Event, allocator_task: asyncio.Task[Any],
                         reader: reader_child.ReaderChild) -> None:
    """Wait for ``stop``; if the allocator or the reader ends first, re-raise its error."""
    stopper = asyncio.create_task(stop.wait())
    reader_exit = asyncio.create_task(reader.process.wait())
    try:
        await asyncio.wait([stopper, allocator_task, reader_exit], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        reader_exit.cancel()
    if not stop.is_set():
        if allocator_task.done():
            allocator_task.result()
            raise RuntimeError("the allocator stopped unexpectedly")
        raise RuntimeError(f"the reader (gpuledger api) exited with {reader.process.returncode}; see {reader.log}")


async def _start_allocator(settings: AllocatorSettings, stop: asyncio.Event,
                           tasks: list[asyncio.Task[Any]]) -> tuple[Allocator, int]:
    ready: asyncio.Future[tuple[Allocator, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        bootstrap.serve(settings, stop, on_ready=lambda a, p: ready.set_result((a, p))))
    tasks.append(task)
    waiting: list[asyncio.Future[Any]] = [task, ready]
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        task.result()  # raises the allocator's start-up error
        raise RuntimeError("allocator stopped before it was ready")
    allocator, port = ready.result()
    while not allocator.keeper.is_leader:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    return allocator, port


async def _load_demo(allocator: Allocator, options: UpOptions, found: endpoints.Endpoints,
                     console: Console) -> None:
    path = options.inventory or DEFAULT_INVENTORY
    try:
        nodes = options.nodes if options.nodes is not None else load_inventory(path)
    except ImportError:
        log.info("inventory loader (services.discovery.static) not available; no inventory loaded")
        return
    await _publish_inventory(allocator, nodes, nats_url=found.nats_url, console=console)
    console.print(f"inventory: {len(nodes)} nodes from {path}")


def up_document(found: endpoints.Endpoints, data_dir: Path) -> dict[str, str]:
    """``up --json``'s line once the stack is up: ``{"status": "up", "nats", "database" (passwords
    redacted), "allocator" (the HTTP API: the reader), "dashboard", "writer" (the writer's probes),
    "webhook" ("" when not served), "endpoints"}`` (the
    endpoints.json path, which holds the full URLs)."""
    return {"status": "up", "nats": redact_url(found.nats_url), "database": redact_url(found.database_url),
            "allocator": found.allocator_http, "dashboard": f"{found.allocator_http}/ui/", "writer": found.writer_http,
            "webhook": found.webhook_https, "endpoints": str(data_dir / endpoints.ENDPOINTS_FILE)}


def _print_urls(console: Console, found: endpoints.Endpoints, data_dir: Path, *, token_file: Path | None,
                open_api: bool) -> None:
    console.print(f"NATS:      {redact_url(found.nats_url)}")
    console.print(f"database:  {redact_url(found.database_url)}")
    console.print(f"API:       {found.allocator_http}  (/api/v1/status /readyz /metrics; gpuledger api)")
    console.print(f"dashboard: {found.allocator_http}/ui/", markup=False)
    console.print(f"allocator: {found.writer_http}  (/readyz /metrics; the writer)")
    if token_file is not None:
        console.print(f"API token: {token_file}  (the CLI reads it; curl -H \"Authorization: Bearer "
                      f"$(cat {token_file})\"; the dashboard signs in once at {found.allocator_http}/ui/?token=TOKEN)",
                      markup=False, soft_wrap=True)
    elif open_api:
        console.print("API token: none (--no-token): any local user or program can use the API", markup=False)
    else:
        console.print(f"API token: from {http.TOKEN_ENV} / {http.TOKEN_FILE_ENV}", markup=False)
    if found.webhook_https:
        console.print(f"webhook:   {found.webhook_https}")
    console.print(f"endpoints: {data_dir / endpoints.ENDPOINTS_FILE}")
    console.print("gpuledger is up (Ctrl-C to stop)", markup=False)
